//! Leader election with a coordination.k8s.io Lease, so that of several operator
//! replicas exactly one runs the controllers (and executes runs). The API is not
//! gated: every replica serves it.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client, ResourceExt};
use tokio_util::sync::CancellationToken;

/// Settings of one elector.
#[derive(Debug, Clone)]
pub struct LeaseConfig {
    pub namespace: String,
    pub name: String,
    pub identity: String,
    /// How long a lease stays valid without renewal.
    pub duration: Duration,
}

impl LeaseConfig {
    fn renew_every(&self) -> Duration {
        self.duration / 3
    }
}

/// Whether `holder` may take the lease now. Pure.
pub fn may_acquire(spec: Option<&LeaseSpec>, identity: &str, now: Timestamp) -> bool {
    let Some(spec) = spec else { return true };
    let holder = spec.holder_identity.as_deref().unwrap_or_default();
    if holder.is_empty() || holder == identity {
        return true;
    }
    let Some(renewed) = spec.renew_time.as_ref().map(|t| t.0) else {
        return true;
    };
    let duration = i64::from(spec.lease_duration_seconds.unwrap_or(15));
    renewed.as_second() + duration < now.as_second()
}

fn spec_for(cfg: &LeaseConfig, previous: Option<&LeaseSpec>, now: Timestamp) -> LeaseSpec {
    let same_holder =
        previous.and_then(|p| p.holder_identity.as_deref()) == Some(cfg.identity.as_str());
    let transitions = previous.and_then(|p| p.lease_transitions).unwrap_or(0);
    LeaseSpec {
        holder_identity: Some(cfg.identity.clone()),
        lease_duration_seconds: Some(i32::try_from(cfg.duration.as_secs()).unwrap_or(15).max(1)),
        acquire_time: if same_holder {
            previous.and_then(|p| p.acquire_time.clone())
        } else {
            Some(MicroTime(now))
        },
        renew_time: Some(MicroTime(now)),
        lease_transitions: Some(if same_holder {
            transitions
        } else {
            transitions + 1
        }),
        ..Default::default()
    }
}

/// One attempt to take or renew the lease; true when this replica holds it now.
async fn try_hold(api: &Api<Lease>, cfg: &LeaseConfig) -> Result<bool, kube::Error> {
    let now = Timestamp::now();
    match api.get_opt(&cfg.name).await? {
        None => {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(cfg.name.clone()),
                    ..Default::default()
                },
                spec: Some(spec_for(cfg, None, now)),
            };
            match api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(e) => Err(e),
            }
        }
        Some(mut lease) => {
            if !may_acquire(lease.spec.as_ref(), &cfg.identity, now) {
                return Ok(false);
            }
            lease.spec = Some(spec_for(cfg, lease.spec.as_ref(), now));
            // The resourceVersion in `lease` makes this a compare-and-swap: of two
            // replicas replacing an expired lease at once, one gets a conflict.
            match api
                .replace(&lease.name_any(), &PostParams::default(), &lease)
                .await
            {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(e) => Err(e),
            }
        }
    }
}

/// Waits until this replica holds the lease.
pub async fn acquire(client: Client, cfg: &LeaseConfig, shutdown: &CancellationToken) -> bool {
    let api: Api<Lease> = Api::namespaced(client, &cfg.namespace);
    loop {
        match try_hold(&api, cfg).await {
            Ok(true) => {
                tracing::info!(identity = %cfg.identity, lease = %cfg.name, "became leader");
                return true;
            }
            Ok(false) => {}
            Err(err) => tracing::warn!(error = %err, "lease acquisition failed; retrying"),
        }
        tokio::select! {
            _ = shutdown.cancelled() => return false,
            _ = tokio::time::sleep(cfg.renew_every()) => {}
        }
    }
}

/// Renews the lease until shutdown; returns when leadership is lost (a renewal did
/// not succeed within the lease duration), so the caller stops its controllers.
pub async fn keep(client: Client, cfg: LeaseConfig, shutdown: CancellationToken) -> bool {
    let api: Api<Lease> = Api::namespaced(client, &cfg.namespace);
    let mut last_success = tokio::time::Instant::now();
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return true,
            _ = tokio::time::sleep(cfg.renew_every()) => {}
        }
        match try_hold(&api, &cfg).await {
            Ok(true) => last_success = tokio::time::Instant::now(),
            Ok(false) => {
                tracing::error!(identity = %cfg.identity, "another replica took the lease");
                return false;
            }
            Err(err) => tracing::warn!(error = %err, "lease renewal failed"),
        }
        // Stop before the lease can expire, so two leaders never overlap.
        if last_success.elapsed() > cfg.duration - cfg.renew_every() {
            tracing::error!("could not renew the lease in time");
            return false;
        }
    }
}

/// Gives the lease up on a clean shutdown, so another replica takes over at once
/// instead of waiting for it to expire.
pub async fn release(client: Client, cfg: &LeaseConfig) {
    let api: Api<Lease> = Api::namespaced(client, &cfg.namespace);
    if let Ok(Some(mut lease)) = api.get_opt(&cfg.name).await
        && lease
            .spec
            .as_ref()
            .and_then(|s| s.holder_identity.as_deref())
            == Some(cfg.identity.as_str())
    {
        if let Some(spec) = lease.spec.as_mut() {
            spec.holder_identity = None;
            spec.renew_time = None;
        }
        let _ = api.replace(&cfg.name, &PostParams::default(), &lease).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(holder: &str, renewed: &str, secs: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(holder.into()),
            renew_time: Some(MicroTime(renewed.parse().unwrap())),
            lease_duration_seconds: Some(secs),
            ..Default::default()
        }
    }

    #[test]
    fn a_held_lease_is_taken_only_after_it_expires() {
        let now: Timestamp = "2026-01-01T00:00:20Z".parse().unwrap();
        assert!(may_acquire(None, "a", now));
        assert!(
            may_acquire(Some(&spec("a", "2026-01-01T00:00:19Z", 15)), "a", now),
            "own lease"
        );
        assert!(
            !may_acquire(Some(&spec("b", "2026-01-01T00:00:10Z", 15)), "a", now),
            "b still holds it"
        );
        assert!(
            may_acquire(Some(&spec("b", "2026-01-01T00:00:04Z", 15)), "a", now),
            "b's lease expired"
        );
    }

    #[test]
    fn transitions_count_changes_of_holder() {
        let cfg = LeaseConfig {
            namespace: "n".into(),
            name: "l".into(),
            identity: "a".into(),
            duration: Duration::from_secs(15),
        };
        let now = Timestamp::now();
        let mut previous = spec("b", "2026-01-01T00:00:00Z", 15);
        previous.lease_transitions = Some(3);
        assert_eq!(
            spec_for(&cfg, Some(&previous), now).lease_transitions,
            Some(4)
        );
        let mine = spec_for(&cfg, Some(&previous), now);
        assert_eq!(spec_for(&cfg, Some(&mine), now).lease_transitions, Some(4));
    }
}
