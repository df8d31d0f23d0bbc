//! `flowline api-key create|list|delete`: key management straight against the
//! cluster, for bootstrapping before any key exists.

use anyhow::Context;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;

use crate::api::auth::{KeyRecord, Scope, hash_key};
use crate::api::keys::{create_key, describe, list_keys};
use crate::cli::ApiKeyCommand;

pub async fn run(command: ApiKeyCommand) -> anyhow::Result<()> {
    let client = crate::kubeutil::client().await?;
    match command {
        ApiKeyCommand::Create {
            namespace,
            name,
            scopes,
            out,
            reuse,
        } => {
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
        ApiKeyCommand::List { namespace } => {
            for key in list_keys(client, &namespace).await? {
                println!("{}", describe(&key));
            }
        }
        ApiKeyCommand::Delete { namespace, id } => {
            let api: Api<Secret> = Api::namespaced(client, &namespace);
            match KeyRecord::from_secret(&api.get(&id).await.context("no such key")?) {
                Some(_) => {
                    api.delete(&id, &Default::default()).await?;
                    eprintln!("deleted API key {id}");
                }
                None => anyhow::bail!("{id} is not an API key"),
            }
        }
    }
    Ok(())
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
