//! The `flowline` command line against the cluster: `--kubeconfig` and `--context`
//! choose the cluster and the default namespace, and `api-key list` prints tables,
//! JSON and YAML.

use std::process::{Command, Output};

use flowline_api::plumbing::auth::Scope;
use kube::config::Kubeconfig;

use crate::support::{TestNamespace, new_key, text};

/// A kubeconfig whose current context points at nothing, and a context `picked` onto
/// the test cluster with `namespace` as its namespace.
fn kubeconfig_with_context(namespace: &str) -> std::path::PathBuf {
    let mut config = Kubeconfig::read().expect("the test kubeconfig");
    let current = config.current_context.clone().unwrap();
    let mut picked = config
        .contexts
        .iter()
        .find(|c| c.name == current)
        .unwrap()
        .clone();
    picked.name = "picked".into();
    picked.context.as_mut().unwrap().namespace = Some(namespace.into());
    let mut nowhere_cluster = config.clusters[0].clone();
    nowhere_cluster.name = "nowhere".into();
    nowhere_cluster.cluster.as_mut().unwrap().server = Some("https://127.0.0.1:1".into());
    let mut nowhere = picked.clone();
    nowhere.name = "nowhere".into();
    nowhere.context.as_mut().unwrap().cluster = "nowhere".into();
    config.clusters.push(nowhere_cluster);
    config.contexts.push(picked);
    config.contexts.push(nowhere);
    config.current_context = Some("nowhere".into());
    let path = std::env::temp_dir().join(format!("{namespace}.kubeconfig"));
    // JSON is YAML: every kubeconfig reader takes it.
    std::fs::write(&path, serde_json::to_vec(&config).unwrap()).unwrap();
    path
}

/// `flowline <args>` with no KUBECONFIG in its environment.
fn flowline(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_flowline"))
        .env_remove("KUBECONFIG")
        .args(args)
        .output()
        .unwrap()
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn kubeconfig_and_context_flags_choose_the_cluster_and_namespace_of_api_key_list() {
    let ns = TestNamespace::new("cli-keys").await;
    new_key(&ns, &[Scope::Read]).await;
    new_key(&ns, &[Scope::Admin]).await;
    let path = kubeconfig_with_context(&ns.name);
    let file = path.to_str().unwrap();

    // The context's namespace is the default.
    let list = |extra: &[&str]| {
        let args = [
            &[
                "--kubeconfig",
                file,
                "--context",
                "picked",
                "api-key",
                "list",
            ],
            extra,
        ];
        let out = flowline(&args.concat());
        assert!(out.status.success(), "{extra:?}: {}", text(&out.stderr));
        text(&out.stdout)
    };
    let keys: Vec<serde_json::Value> = serde_json::from_str(&list(&["-o", "json"])).unwrap();
    let mut scopes: Vec<String> = keys.iter().map(|k| k["scopes"][0].to_string()).collect();
    scopes.sort();
    assert_eq!(scopes, ["\"admin\"", "\"read\""], "{keys:?}");
    for key in &keys {
        let fields: Vec<&String> = key.as_object().unwrap().keys().collect();
        assert_eq!(
            fields,
            ["created_at", "id", "name", "scopes"],
            "never a value or hash"
        );
    }
    let yaml: Vec<serde_json::Value> =
        serde_saphyr::from_str(&list(&["--output", "yaml"])).unwrap();
    assert_eq!(yaml, keys);
    let table = list(&[]);
    assert!(table.starts_with("ID "), "{table}");
    assert_eq!(table.lines().count(), 3, "{table}");
    // Global flags may follow the subcommand; an explicit namespace wins over the
    // context's.
    let after = flowline(&[
        "api-key",
        "list",
        "-o",
        "json",
        "--context",
        "picked",
        "--kubeconfig",
        file,
    ]);
    assert_eq!(
        serde_json::from_slice::<Vec<serde_json::Value>>(&after.stdout).unwrap(),
        keys
    );
    let other: Vec<serde_json::Value> =
        serde_json::from_str(&list(&["-n", "default", "-o", "json"])).unwrap();
    assert!(
        other
            .iter()
            .all(|k| !keys.iter().any(|mine| mine["id"] == k["id"]))
    );

    // Without --context, the file's current context (a cluster that does not answer)
    // is used, and the command fails saying so.
    let failed = flowline(&["--kubeconfig", file, "api-key", "list"]);
    assert!(!failed.status.success());
    let stderr = text(&failed.stderr);
    assert!(
        stderr.contains("error: ") && stderr.contains("Connection refused"),
        "{stderr}"
    );
    // An unknown context is a clear error before anything is sent.
    let unknown = flowline(&[
        "--kubeconfig",
        file,
        "--context",
        "missing",
        "api-key",
        "list",
    ]);
    assert!(!unknown.status.success());
    assert!(
        text(&unknown.stderr).contains("missing"),
        "{}",
        text(&unknown.stderr)
    );
    let _ = std::fs::remove_file(&path);
}

/// Keys an earlier version kept as Secrets (type `flowline.io/api-key`) become ApiKeys
/// with `flowline api-key migrate`: same id, scopes and value, so the key authenticates
/// at once; the Secret is gone; a second run changes nothing; a malformed one stays.
#[tokio::test]
#[ignore = "needs cluster"]
async fn api_key_migrate_moves_keys_out_of_secrets() {
    use k8s_openapi::api::core::v1::Secret;
    let api = crate::support::TestApi::start("cli-migrate").await;
    let value = "flk_migratedmigratedmigratedmigratedmigrat";
    let hash = flowline_api::plumbing::auth::hash_key(value);
    let legacy = |name: &str, data: serde_json::Value| -> Secret {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": {"flowline.io/api-key": "true"}},
            "type": "flowline.io/api-key",
            "stringData": data,
        }))
        .unwrap()
    };
    let secrets = api.ns.api::<Secret>();
    for secret in [
        legacy(
            "key-old",
            serde_json::json!({"name": "ci", "scopes": "read,execute",
            "sha256": hash, "created-at": "2025-05-01T00:00:00Z"}),
        ),
        legacy(
            "key-broken",
            serde_json::json!({"name": "no hash", "scopes": "admin"}),
        ),
    ] {
        secrets.create(&Default::default(), &secret).await.unwrap();
    }
    let kubeconfig = std::env::var("KUBECONFIG").unwrap();
    let migrate = || {
        flowline(&[
            "--kubeconfig",
            &kubeconfig,
            "api-key",
            "migrate",
            "-n",
            &api.ns.name,
        ])
    };
    let out = migrate();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let said = text(&out.stderr);
    assert!(
        said.contains(&format!("moved API key {}/key-old", api.ns.name)),
        "{said}"
    );
    assert!(said.contains("key-broken alone"), "{said}");
    let moved = api
        .ns
        .api::<flowline_core::crd::ApiKey>()
        .get("key-old")
        .await
        .unwrap();
    assert_eq!(moved.spec.scopes, [Scope::Read, Scope::Execute]);
    assert_eq!(moved.spec.sha256, hash);
    assert!(secrets.get_opt("key-old").await.unwrap().is_none());
    assert!(secrets.get_opt("key-broken").await.unwrap().is_some());
    // The moved key authenticates with the same value, and shows its first age.
    crate::support::eventually(
        "the moved key to authenticate",
        std::time::Duration::from_secs(10),
        || async {
            let res = api.get(value, "/v1/workflows").await;
            (res.status() == 200).then_some(())
        },
    )
    .await;
    let keys: serde_json::Value = api
        .get(&api.admin_key, "/v1/api-keys")
        .await
        .json()
        .await
        .unwrap();
    let old = keys["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["id"] == "key-old")
        .cloned()
        .unwrap();
    assert_eq!(old["created_at"], "2025-05-01T00:00:00.000Z", "{old}");
    let again = migrate();
    assert!(again.status.success(), "{}", text(&again.stderr));
    assert!(!text(&again.stderr).contains("moved API key"));
}
