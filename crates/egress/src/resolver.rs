//! The DNS resolver of the guarded client: it resolves on every new connection and hands
//! the connector only the addresses the policy admits, so the connection goes to an
//! address that was checked. There is no second lookup a rebinding DNS server could
//! answer differently.

use std::net::SocketAddr;
use std::sync::Arc;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

use super::policy::{DestinationPolicy, is_loopback_name};

/// A name that could not be resolved (or resolved to nothing).
#[derive(Debug, thiserror::Error)]
#[error("cannot resolve {host}: {reason}")]
pub struct ResolveError {
    pub host: String,
    pub reason: String,
}

pub struct GuardedResolver(pub Arc<DestinationPolicy>);

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let policy = self.0.clone();
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let found = if is_loopback_name(&host) {
                DestinationPolicy::loopback_addresses().to_vec()
            } else {
                tokio::net::lookup_host((host.as_str(), 0))
                    .await
                    .map_err(|e| ResolveError {
                        host: host.clone(),
                        reason: e.to_string(),
                    })?
                    .map(|addr| addr.ip())
                    .collect()
            };
            let admitted = policy.admit(&host, found)?;
            if admitted.is_empty() {
                return Err(Box::new(ResolveError {
                    host,
                    reason: "no addresses".into(),
                }) as _);
            }
            // Port 0: the connector sets the port of the URL.
            let addrs = admitted.into_iter().map(|ip| SocketAddr::new(ip, 0));
            Ok(Box::new(addrs) as Addrs)
        })
    }
}
