//! Run tags: up to ten `key: value` pairs set when a run is created, kept as the Run's
//! labels `tags.flowline.io/<key>` so that kubectl selects by them (`-l
//! tags.flowline.io/customer=acme`) and a Run applied with those labels has those tags.
//! Pure: the API validates a body's tags and filters lists with these functions.

use std::collections::BTreeMap;

use kube::ResourceExt;

use super::Run;

/// Prefix of a tag's label key.
pub const LABEL_PREFIX: &str = "tags.flowline.io/";
/// The most tags a run may have.
pub const MAX_TAGS: usize = 10;
/// The longest key and value (a label name's and value's limit).
pub const MAX_LENGTH: usize = 63;

/// Why a key is refused, if it is: 1 to 63 of `a-z 0-9 _ . -`, starting and (as a
/// label name must) ending with a letter or digit.
pub fn key_problem(key: &str) -> Option<String> {
    let allowed = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || "_.-".contains(c);
    let alphanumeric =
        |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    if key.is_empty() || key.len() > MAX_LENGTH {
        Some(format!("a tag key has 1 to {MAX_LENGTH} characters"))
    } else if !key.chars().all(allowed) {
        Some("a tag key holds only a-z, 0-9, '_', '.' and '-'".into())
    } else if !alphanumeric(key.chars().next()) || !alphanumeric(key.chars().last()) {
        Some("a tag key starts and ends with a letter (a-z) or a digit".into())
    } else {
        None
    }
}

/// Why a value is refused, if it is: at most 63 of `A-Z a-z 0-9 _ . -`, empty or
/// starting and ending with a letter or digit (a label value).
pub fn value_problem(value: &str) -> Option<String> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || "_.-".contains(c);
    let alphanumeric = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    if value.len() > MAX_LENGTH {
        Some(format!("a tag value has at most {MAX_LENGTH} characters"))
    } else if !value.chars().all(allowed) {
        Some("a tag value holds only letters, digits, '_', '.' and '-'".into())
    } else if !value.is_empty()
        && (!alphanumeric(value.chars().next()) || !alphanumeric(value.chars().last()))
    {
        Some("a tag value starts and ends with a letter or a digit".into())
    } else {
        None
    }
}

/// The problems of a set of tags, each with the key it concerns (`None`: the set).
pub fn problems(tags: &BTreeMap<String, String>) -> Vec<(Option<&str>, String)> {
    let mut found = Vec::new();
    if tags.len() > MAX_TAGS {
        found.push((None, format!("a run has at most {MAX_TAGS} tags")));
    }
    for (key, value) in tags {
        if let Some(p) = key_problem(key).or_else(|| value_problem(value)) {
            found.push((Some(key.as_str()), p));
        }
    }
    found
}

/// The labels that carry `tags`.
pub fn labels(tags: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    tags.iter()
        .map(|(k, v)| (format!("{LABEL_PREFIX}{k}"), v.clone()))
        .collect()
}

/// The tags of `run`, from its labels.
pub fn of(run: &Run) -> BTreeMap<String, String> {
    run.labels()
        .iter()
        .filter_map(|(k, v)| Some((k.strip_prefix(LABEL_PREFIX)?.to_string(), v.clone())))
        .collect()
}

/// Whether `run` has every `(key, value)` of `wanted`.
pub fn has_all(run: &Run, wanted: &[(String, String)]) -> bool {
    let labels = run.labels();
    wanted
        .iter()
        .all(|(k, v)| labels.get(&format!("{LABEL_PREFIX}{k}")) == Some(v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_values_are_what_a_label_accepts() {
        for (key, ok) in [
            ("customer", true),
            ("a", true),
            ("env.region_1-b", true),
            ("9lives", true),
            ("", false),
            ("Customer", false),
            ("-a", false),
            ("a-", false),
            ("a/b", false),
            ("a b", false),
            (&"k".repeat(63), true),
            (&"k".repeat(64), false),
        ] {
            assert_eq!(key_problem(key).is_none(), ok, "{key:?}");
        }
        for (value, ok) in [
            ("acme", true),
            ("", true),
            ("ACME-42.eu_1", true),
            ("-x", false),
            ("x.", false),
            ("a b", false),
            ("é", false),
            (&"v".repeat(63), true),
            (&"v".repeat(64), false),
        ] {
            assert_eq!(value_problem(value).is_none(), ok, "{value:?}");
        }
    }

    #[test]
    fn a_set_is_bounded_and_each_bad_pair_is_named() {
        let many: BTreeMap<String, String> = (0..11)
            .map(|i| (format!("k{i}"), "v".to_string()))
            .collect();
        assert_eq!(problems(&many).len(), 1);
        let bad = BTreeMap::from([
            ("ok".to_string(), "v".to_string()),
            ("Bad".to_string(), "v".to_string()),
            ("fine".to_string(), "-v".to_string()),
        ]);
        let keys: Vec<_> = problems(&bad).into_iter().map(|(k, _)| k).collect();
        assert_eq!(keys, vec![Some("Bad"), Some("fine")]);
    }

    #[test]
    fn tags_round_trip_through_labels_and_filter_runs() {
        let tags = BTreeMap::from([
            ("customer".to_string(), "acme".to_string()),
            ("tier".to_string(), "gold".to_string()),
        ]);
        let mut run: Run = serde_json::from_value(serde_json::json!({
            "apiVersion": "flowline.io/v1", "kind": "Run",
            "metadata": {"name": "r", "labels": {"flowline.io/workflow": "wf"}},
            "spec": {"workflowRef": "wf"}
        }))
        .unwrap();
        run.labels_mut().extend(labels(&tags));
        assert_eq!(of(&run), tags);
        let want = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        assert!(has_all(&run, &[]));
        assert!(has_all(&run, &want(&[("customer", "acme")])));
        assert!(has_all(
            &run,
            &want(&[("customer", "acme"), ("tier", "gold")])
        ));
        assert!(!has_all(
            &run,
            &want(&[("customer", "acme"), ("tier", "silver")])
        ));
        assert!(!has_all(&run, &want(&[("workflow", "wf")])));
    }
}
