//! Secrets sealed into the object they belong to, so that the API, which must know
//! them, reads them from its cache of that object instead of from Secrets: a
//! Workflow's inbound hook secret, a Webhook's signing secrets.
//!
//! A secret is encrypted and authenticated (AES-256-GCM) with the installation's seal
//! key, which only the API and the controller can read (one Secret of the install
//! namespace, granted by name). The associated data binds the sealed text to what it is
//! for (the annotation that holds it) and to the object's namespace and name: copied to
//! another object or annotation, it does not open. Anyone who can read the object sees
//! only ciphertext; anyone who can write it can replace the secret only with one sealed
//! by this installation for the same place.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use ring::rand::{SecureRandom, SystemRandom};

/// The annotation of a Workflow holding its inbound hook secret, sealed by the API.
pub const ANNOTATION: &str = "flowline.io/hook-secret";
/// `type` of a Secret that brings a workflow's inbound secret (kubectl, GitOps): a type
/// of its own, so no other Secret is mistaken for one, and workflow templates cannot
/// read it (every `flowline.io/…` type is refused to them).
pub const HOOK_SECRET_TYPE: &str = "flowline.io/hook-secret";
/// The key of that Secret's data holding the secret.
pub const HOOK_SECRET_KEY: &str = "secret";

/// Name of the Secret that may bring the inbound secret of `workflow`.
pub fn hook_secret_name(workflow: &str) -> String {
    format!("{workflow}-hook")
}
/// Prefix of a sealed text: the format's version.
const PREFIX: &str = "v1.";
/// Bytes of a seal key.
pub const KEY_LEN: usize = 32;

/// The installation's seal key.
pub struct SealKey(LessSafeKey);

impl std::fmt::Debug for SealKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SealKey(…)")
    }
}

/// Why a seal key cannot be made.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("a seal key is {KEY_LEN} bytes, not {0}")]
pub struct BadKey(pub usize);

impl SealKey {
    pub fn new(bytes: &[u8]) -> Result<SealKey, BadKey> {
        let key = UnboundKey::new(&AES_256_GCM, bytes).map_err(|_| BadKey(bytes.len()))?;
        Ok(SealKey(LessSafeKey::new(key)))
    }

    /// A fresh random key's bytes.
    pub fn generate() -> [u8; KEY_LEN] {
        let mut bytes = [0u8; KEY_LEN];
        SystemRandom::new()
            .fill(&mut bytes)
            .expect("the system's random source works");
        bytes
    }

    /// `secret` sealed for the annotation `purpose` of the object `name` of `namespace`.
    pub fn seal(&self, purpose: &str, namespace: &str, name: &str, secret: &str) -> String {
        let mut nonce = [0u8; NONCE_LEN];
        SystemRandom::new()
            .fill(&mut nonce)
            .expect("the system's random source works");
        let mut sealed = secret.as_bytes().to_vec();
        self.0
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(bound_to(purpose, namespace, name)),
                &mut sealed,
            )
            .expect("a hook secret is far below AES-GCM's size limit");
        let mut out = nonce.to_vec();
        out.extend_from_slice(&sealed);
        format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(out))
    }

    /// The secret `sealed` holds for the annotation `purpose` of the object `name` of
    /// `namespace`; `None` when it is not a sealed text of this key for that place.
    pub fn open(&self, purpose: &str, namespace: &str, name: &str, sealed: &str) -> Option<String> {
        let bytes = URL_SAFE_NO_PAD.decode(sealed.strip_prefix(PREFIX)?).ok()?;
        if bytes.len() < NONCE_LEN {
            return None;
        }
        let (nonce, text) = bytes.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
        let mut text = text.to_vec();
        let plain = self
            .0
            .open_in_place(
                nonce,
                Aad::from(bound_to(purpose, namespace, name)),
                &mut text,
            )
            .ok()?;
        String::from_utf8(plain.to_vec()).ok()
    }
}

/// The associated data of a sealed secret.
fn bound_to(purpose: &str, namespace: &str, name: &str) -> Vec<u8> {
    format!("{purpose}\0{namespace}\0{name}").into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_secret_opens_only_for_its_workflow_and_key() {
        let key = SealKey::new(&SealKey::generate()).unwrap();
        let sealed = key.seal(ANNOTATION, "team-a", "orders", "whsec_abc");
        assert!(sealed.starts_with("v1."));
        assert!(!sealed.contains("whsec_abc"));
        assert_eq!(
            key.open(ANNOTATION, "team-a", "orders", &sealed).as_deref(),
            Some("whsec_abc")
        );
        assert_ne!(
            sealed,
            key.seal(ANNOTATION, "team-a", "orders", "whsec_abc"),
            "a fresh nonce each time"
        );
        type Row<'a> = (&'a str, &'a str, &'a str, String);
        let other = SealKey::new(&SealKey::generate()).unwrap();
        let mut tampered = sealed.clone();
        tampered.pop();
        tampered.push(if sealed.ends_with('A') { 'B' } else { 'A' });
        let refused: Vec<Row> = vec![
            ("another workflow", "team-a", "billing", sealed.clone()),
            ("another account", "team-b", "orders", sealed.clone()),
            ("changed", "team-a", "orders", tampered),
            ("not sealed", "team-a", "orders", "whsec_abc".into()),
            ("too short", "team-a", "orders", "v1.AAAA".into()),
            ("not base64", "team-a", "orders", "v1.!!!".into()),
        ];
        for (case, namespace, name, text) in refused {
            assert_eq!(key.open(ANNOTATION, namespace, name, &text), None, "{case}");
        }
        assert_eq!(
            key.open("flowline.io/other", "team-a", "orders", &sealed),
            None,
            "another purpose"
        );
        assert_eq!(
            other.open(ANNOTATION, "team-a", "orders", &sealed),
            None,
            "another key"
        );
    }

    #[test]
    fn keys_are_32_bytes() {
        assert_eq!(SealKey::new(&[0; 16]).unwrap_err(), BadKey(16));
        assert!(SealKey::new(&[7; 32]).is_ok());
    }
}
