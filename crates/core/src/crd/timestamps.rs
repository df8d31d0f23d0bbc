//! When an object was created and when its spec last changed, to the millisecond.
//!
//! Kubernetes' `creationTimestamp` and managedFields times have only seconds, so
//! whoever creates an object (the API, the schedule controller) records precise
//! times in annotations, and whoever reads them (the API's views, the controllers
//! ordering runs) reads them back here. Part of `crd` because these annotations
//! are part of the objects' shape, shared by every layer above it.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, ObjectMeta, Time};

use crate::clock::format_ts;

/// Annotation with the millisecond creation time the creator records (Kubernetes'
/// `creationTimestamp` has only seconds).
pub const CREATED_AT_ANNOTATION: &str = "flowline.io/created-at";
/// Annotation with the time of the API's last spec write.
pub const UPDATED_AT_ANNOTATION: &str = "flowline.io/updated-at";
/// On a scheduled run: the cron tick it was started for (RFC 3339).
pub const SCHEDULED_FOR_ANNOTATION: &str = "flowline.io/scheduled-for";

fn k8s_time(t: &Time) -> Timestamp {
    t.0
}

/// When the object was created, to the millisecond where the creator recorded it.
pub fn created_at(meta: &ObjectMeta) -> Timestamp {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(CREATED_AT_ANNOTATION))
        .and_then(|v| v.parse().ok())
        .or_else(|| meta.creation_timestamp.as_ref().map(k8s_time))
        .unwrap_or(Timestamp::UNIX_EPOCH)
}

/// When the spec last changed, whoever changed it: the API's annotation, or the
/// newest non-status managedFields entry (kubectl, GitOps), whichever is later.
pub fn updated_at(meta: &ObjectMeta) -> Timestamp {
    let created = created_at(meta);
    let annotated: Option<Timestamp> = meta
        .annotations
        .as_ref()
        .and_then(|a| a.get(UPDATED_AT_ANNOTATION))
        .and_then(|v| v.parse().ok());
    let managed = newest_spec_write(meta);
    let newest = match (annotated, managed) {
        // managedFields have second precision: prefer the precise annotation when
        // both fall in the same second.
        (Some(a), Some(m)) if m.as_second() > a.as_second() => m,
        (Some(a), _) => a,
        (None, Some(m)) => m,
        (None, None) => created,
    };
    newest.max(created)
}

/// Drops an object's managedFields but for what [`updated_at`] reads from them (the
/// newest non-status write time), for caches: managedFields list every field each
/// writer set, often outweighing the object itself.
pub fn compact_managed_fields(meta: &mut ObjectMeta) {
    let newest = newest_spec_write(meta);
    meta.managed_fields = newest.map(|time| {
        vec![ManagedFieldsEntry {
            time: Some(Time(time)),
            ..Default::default()
        }]
    });
}

/// The newest non-status managedFields time: the last write of spec or metadata.
fn newest_spec_write(meta: &ObjectMeta) -> Option<Timestamp> {
    meta.managed_fields
        .iter()
        .flatten()
        .filter(|f| f.subresource.as_deref() != Some("status"))
        .filter_map(|f| f.time.as_ref().map(k8s_time))
        .max()
}

/// Annotations every object Flowline creates carries.
pub fn creation_annotations(at: Timestamp) -> BTreeMap<String, String> {
    let t = format_ts(at);
    BTreeMap::from([
        (CREATED_AT_ANNOTATION.to_string(), t.clone()),
        (UPDATED_AT_ANNOTATION.to_string(), t),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn updated_at_prefers_the_newest_writer() {
        let meta: ObjectMeta = serde_json::from_value(json!({
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "annotations": {CREATED_AT_ANNOTATION: "2026-01-01T00:00:00.250Z", UPDATED_AT_ANNOTATION: "2026-01-01T00:00:10.500Z"},
            "managedFields": [
                {"manager": "kubectl", "operation": "Apply", "time": "2026-01-01T00:00:30Z"},
                {"manager": "flowline-controller", "operation": "Update", "subresource": "status", "time": "2026-01-01T00:05:00Z"}
            ]
        }))
        .unwrap();
        assert_eq!(format_ts(created_at(&meta)), "2026-01-01T00:00:00.250Z");
        assert_eq!(
            format_ts(updated_at(&meta)),
            "2026-01-01T00:00:30.000Z",
            "status writes do not count"
        );
    }

    #[test]
    fn compacted_managed_fields_keep_the_update_time_only() {
        let mut meta: ObjectMeta = serde_json::from_value(json!({
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "managedFields": [
                {"manager": "kubectl", "operation": "Apply", "time": "2026-01-01T00:00:30Z",
                 "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:steps": {}}}},
                {"manager": "flowline-api", "operation": "Update", "time": "2026-01-01T00:00:20Z",
                 "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:name": {}}}},
                {"manager": "flowline-controller", "operation": "Update", "subresource": "status",
                 "time": "2026-01-01T00:05:00Z", "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {}}}
            ]
        }))
        .unwrap();
        let before = updated_at(&meta);
        compact_managed_fields(&mut meta);
        assert_eq!(updated_at(&meta), before);
        let kept = meta.managed_fields.as_ref().unwrap();
        assert_eq!(kept.len(), 1);
        assert!(kept[0].fields_v1.is_none() && kept[0].manager.is_none());
        let mut bare = ObjectMeta::default();
        compact_managed_fields(&mut bare);
        assert!(bare.managed_fields.is_none());
    }

    #[test]
    fn creation_annotations_round_trip() {
        let at: Timestamp = "2026-01-01T00:00:00.250Z".parse().unwrap();
        let meta = ObjectMeta {
            annotations: Some(creation_annotations(at)),
            ..Default::default()
        };
        assert_eq!(created_at(&meta), at);
        assert_eq!(updated_at(&meta), at);
    }
}
