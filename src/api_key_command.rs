//! `flowline api-key create|list|delete`: key management straight against the
//! cluster, for bootstrapping before any key exists.

use anyhow::Context;
use kube::Api;

use crate::cli::{ApiKeyCommand, OutputFormat};
use flowline_api::keys::views::ApiKeyView;
use flowline_api::keys::{create_key, list_keys};
use flowline_api::plumbing::auth::{KeyRecord, Scope, hash_key};
use flowline_core::crd::ApiKey;
use flowline_kube::Connection;

pub async fn run(command: ApiKeyCommand, connection: &Connection) -> anyhow::Result<()> {
    let config = connection.config().await?;
    // Without --namespace, the context's namespace (as kubectl does).
    let context_namespace = config.default_namespace.clone();
    let in_namespace = |given: Option<String>| given.unwrap_or_else(|| context_namespace.clone());
    let client = kube::Client::try_from(config)?;
    match command {
        ApiKeyCommand::Create {
            namespace,
            name,
            scopes,
            out,
            reuse,
        } => {
            let namespace = in_namespace(namespace);
            let scopes = scopes
                .iter()
                .map(|s| Scope::parse(s.trim()).with_context(|| format!("unknown scope {s:?}")))
                .collect::<anyhow::Result<Vec<_>>>()?;
            if reuse
                && let Some(path) = &out
                && let Ok(existing) = std::fs::read_to_string(path)
            {
                let existing = existing.trim();
                let keys = list_keys(client.clone(), &namespace).await?;
                if keys
                    .iter()
                    .any(|k: &KeyRecord| k.matches(&hash_key(existing)))
                {
                    eprintln!(
                        "the API key in {} is still valid; nothing created",
                        path.display()
                    );
                    return Ok(());
                }
            }
            let key = create_key(client, &namespace, &name, &scopes).await?;
            if let Some(path) = &out {
                write_secret_file(path, &key.value)?;
            }
            println!("{}", key.value);
            eprintln!(
                "created API key {} in namespace {namespace}; the value above is shown only once",
                key.record.id
            );
        }
        ApiKeyCommand::List { namespace, output } => {
            let keys = list_keys(client, &in_namespace(namespace)).await?;
            print!("{}", render(keys, output)?);
        }
        ApiKeyCommand::Delete { namespace, id } => {
            let api: Api<ApiKey> = Api::namespaced(client, &in_namespace(namespace));
            api.delete(&id, &Default::default())
                .await
                .with_context(|| format!("no API key {id}"))?;
            eprintln!("deleted API key {id}");
        }
        ApiKeyCommand::Migrate { namespaces } => {
            let scopes: Vec<Option<&str>> = if namespaces.is_empty() {
                vec![None]
            } else {
                namespaces.iter().map(|ns| Some(ns.as_str())).collect()
            };
            for namespace in scopes {
                let done = flowline_api::keys::migrate::move_keys(&client, namespace).await?;
                for id in &done.moved {
                    eprintln!("moved API key {id} from its Secret to an ApiKey");
                }
                for id in &done.skipped {
                    eprintln!(
                        "left the Secret {id} alone: not a well-formed key, or its ApiKey holds another hash"
                    );
                }
            }
        }
    }
    Ok(())
}

/// The keys, newest first (as `GET /v1/api-keys` lists them), in `format`; JSON and
/// YAML items have the API's shape.
fn render(mut keys: Vec<KeyRecord>, format: OutputFormat) -> anyhow::Result<String> {
    keys.sort_by(|a, b| {
        b.created_at
            .cmp(&a.created_at)
            .then_with(|| a.id.cmp(&b.id))
    });
    let views: Vec<ApiKeyView> = keys.iter().map(ApiKeyView::from).collect();
    Ok(match format {
        OutputFormat::Json => serde_json::to_string_pretty(&views)? + "\n",
        OutputFormat::Yaml if views.is_empty() => "[]\n".to_string(),
        OutputFormat::Yaml => serde_saphyr::to_string(&views)?,
        OutputFormat::Table => table(&keys),
    })
}

fn table(keys: &[KeyRecord]) -> String {
    let mut rows = vec![["ID", "NAME", "SCOPES", "CREATED"].map(String::from)];
    for key in keys {
        let scopes: Vec<&str> = key.scopes.iter().map(|s| s.as_str()).collect();
        rows.push([
            key.id.clone(),
            key.name.clone(),
            scopes.join(","),
            key.created_at
                .map(flowline_core::clock::format_ts)
                .unwrap_or_else(|| "-".into()),
        ]);
    }
    let widths: Vec<usize> = (0..4)
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in rows {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        out.push_str(cells.join("   ").trim_end());
        out.push('\n');
    }
    out
}

fn write_secret_file(path: &std::path::Path, value: &str) -> anyhow::Result<()> {
    use std::io::Write;
    #[cfg(unix)]
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    options.mode(0o600);
    let mut file = options
        .open(path)
        .with_context(|| format!("cannot write {}", path.display()))?;
    writeln!(file, "{value}")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(id: &str, name: &str, scopes: &[Scope], created: Option<&str>) -> KeyRecord {
        KeyRecord {
            id: id.into(),
            namespace: "ns".into(),
            name: name.into(),
            scopes: scopes.iter().copied().collect(),
            hash: "h".into(),
            created_at: created.map(|t| t.parse().unwrap()),
        }
    }

    fn keys() -> Vec<KeyRecord> {
        vec![
            key(
                "key-old",
                "ci",
                &[Scope::Read],
                Some("2026-01-01T00:00:00Z"),
            ),
            key(
                "key-new",
                "deploy bot",
                &[Scope::Execute, Scope::Read],
                Some("2026-02-01T10:00:00Z"),
            ),
            key("key-undated", "legacy", &[Scope::Admin], None),
        ]
    }

    #[test]
    fn a_table_has_a_header_and_aligned_columns_newest_first() {
        let text = render(keys(), OutputFormat::Table).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines,
            [
                "ID            NAME         SCOPES         CREATED",
                "key-new       deploy bot   read,execute   2026-02-01T10:00:00.000Z",
                "key-old       ci           read           2026-01-01T00:00:00.000Z",
                "key-undated   legacy       admin          -",
            ]
        );
        assert_eq!(
            render(vec![], OutputFormat::Table).unwrap(),
            "ID   NAME   SCOPES   CREATED\n"
        );
    }

    #[test]
    fn json_and_yaml_items_have_the_api_shape_and_never_a_value() {
        let json: serde_json::Value =
            serde_json::from_str(&render(keys(), OutputFormat::Json).unwrap()).unwrap();
        assert_eq!(
            json[0],
            serde_json::json!({"id": "key-new", "name": "deploy bot",
                "scopes": ["read", "execute"], "created_at": "2026-02-01T10:00:00.000Z"})
        );
        assert_eq!(json[2]["created_at"], serde_json::Value::Null);
        let yaml = render(keys(), OutputFormat::Yaml).unwrap();
        let parsed: serde_json::Value = serde_saphyr::from_str(&yaml).unwrap();
        assert_eq!(parsed, json, "{yaml}");
        assert_eq!(render(vec![], OutputFormat::Json).unwrap().trim(), "[]");
        assert_eq!(render(vec![], OutputFormat::Yaml).unwrap().trim(), "[]");
        for format in [OutputFormat::Table, OutputFormat::Json, OutputFormat::Yaml] {
            assert!(!render(keys(), format).unwrap().contains("\"h\""));
        }
    }
}
