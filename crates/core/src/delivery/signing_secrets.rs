//! A webhook's signing secrets sealed into the Webhook itself (the annotation
//! [`ANNOTATION`], see [`crate::sealed`]): the API makes and rotates them without
//! reading or writing any Secret, and the delivery worker opens them to sign. Webhooks
//! applied with kubectl keep signing with the Secret their `secretRef` names (or
//! `<name>-signing`) until the API first rotates them; that Secret then still signs
//! for the rotation's grace period. Pure.

use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};

use crate::sealed::SealKey;

/// The annotation of a Webhook holding its signing secrets, sealed.
pub const ANNOTATION: &str = "flowline.io/signing-secrets";
/// How long the secret a rotation replaces still signs.
pub const ROTATION_GRACE: SignedDuration = SignedDuration::from_hours(24);

/// What the annotation holds, once opened.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct SigningSecrets {
    /// The current secret: it signs first, and alone in `X-Service-Signature`.
    pub secret: String,
    /// The secret the last rotation replaced, signing until `previous_until`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_until: Option<Timestamp>,
    /// A webhook that signed with its Secret before its first rotation here: that
    /// Secret's current secret still signs until then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref_until: Option<Timestamp>,
}

impl SigningSecrets {
    /// A new webhook's secrets.
    pub fn new(secret: &str) -> Self {
        SigningSecrets {
            secret: secret.into(),
            previous: None,
            previous_until: None,
            secret_ref_until: None,
        }
    }

    /// The secrets after rotating `current` (`None`: the webhook signed with its
    /// Secret) to `new` at `now`.
    pub fn rotated(current: Option<&SigningSecrets>, new: &str, now: Timestamp) -> Self {
        let until = now + ROTATION_GRACE;
        match current {
            Some(current) => SigningSecrets {
                secret: new.into(),
                previous: Some(current.secret.clone()),
                previous_until: Some(until),
                secret_ref_until: current.secret_ref_until.filter(|t| now < *t),
            },
            None => SigningSecrets {
                secret_ref_until: Some(until),
                ..SigningSecrets::new(new)
            },
        }
    }

    /// The secrets held here that sign at `now`, current first.
    pub fn keys(&self, now: Timestamp) -> Vec<String> {
        let mut keys = vec![self.secret.clone()];
        if let (Some(previous), Some(until)) = (&self.previous, self.previous_until)
            && now < until
        {
            keys.push(previous.clone());
        }
        keys
    }

    /// Whether the webhook's Secret still signs at `now`.
    pub fn secret_ref_signs(&self, now: Timestamp) -> bool {
        self.secret_ref_until.is_some_and(|until| now < until)
    }

    /// Sealed for the Webhook `name` of `namespace`.
    pub fn seal(&self, key: &SealKey, namespace: &str, name: &str) -> String {
        let text = serde_json::to_string(self).expect("secrets always serialize");
        key.seal(ANNOTATION, namespace, name, &text)
    }

    /// The secrets `sealed` holds for the Webhook `name` of `namespace`.
    pub fn open(key: &SealKey, namespace: &str, name: &str, sealed: &str) -> Option<Self> {
        serde_json::from_str(&key.open(ANNOTATION, namespace, name, sealed)?).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(hours: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000).unwrap() + SignedDuration::from_hours(hours)
    }

    #[test]
    fn a_rotation_keeps_the_replaced_secret_signing_for_a_day() {
        let first = SigningSecrets::new("whsec_a");
        assert_eq!(first.keys(at(0)), vec!["whsec_a"]);
        let second = SigningSecrets::rotated(Some(&first), "whsec_b", at(1));
        assert_eq!(second.keys(at(2)), vec!["whsec_b", "whsec_a"]);
        assert_eq!(second.keys(at(25)), vec!["whsec_b"], "past the grace");
        let third = SigningSecrets::rotated(Some(&second), "whsec_c", at(3));
        assert_eq!(
            third.keys(at(4)),
            vec!["whsec_c", "whsec_b"],
            "the one it replaced, not the one before"
        );
        assert!(!third.secret_ref_signs(at(4)));
    }

    #[test]
    fn a_webhook_rotated_away_from_its_secret_still_signs_with_it_for_a_day() {
        let moved = SigningSecrets::rotated(None, "whsec_b", at(0));
        assert_eq!(moved.keys(at(1)), vec!["whsec_b"]);
        assert!(moved.secret_ref_signs(at(23)));
        assert!(!moved.secret_ref_signs(at(24)));
        let again = SigningSecrets::rotated(Some(&moved), "whsec_c", at(2));
        assert!(again.secret_ref_signs(at(23)), "the Secret's grace is kept");
        let late = SigningSecrets::rotated(Some(&moved), "whsec_c", at(30));
        assert_eq!(late.secret_ref_until, None, "an ended grace is dropped");
    }

    #[test]
    fn sealed_secrets_open_only_for_their_webhook() {
        let key = SealKey::new(&[9; 32]).unwrap();
        let secrets =
            SigningSecrets::rotated(Some(&SigningSecrets::new("whsec_a")), "whsec_b", at(0));
        let sealed = secrets.seal(&key, "team", "wh-1");
        assert!(!sealed.contains("whsec"));
        assert_eq!(
            SigningSecrets::open(&key, "team", "wh-1", &sealed),
            Some(secrets)
        );
        assert_eq!(SigningSecrets::open(&key, "team", "wh-2", &sealed), None);
        assert_eq!(
            SigningSecrets::open(&key, "team", "wh-1", "v1.garbage"),
            None
        );
    }
}
