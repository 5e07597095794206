//! Reading the PEM files a configuration names: certificates, keys, CAs.
//!
//! Files are read during validation, so `switchyard check` reports an
//! unreadable or broken file at the key that names it, and a reload reads
//! them again (a renewed certificate at the same path is a change). A
//! relative path is relative to the configuration file's directory, or to the
//! working directory when the text did not come from a file
//! ([`crate::parse`]).
//!
//! Invariants of what is returned: a [`CertKey`]'s certificate file holds at
//! least one certificate, the first of which parses as X.509 and belongs to
//! the key (checked with rustls and its aws-lc-rs provider, as the engine
//! will load it); a CA file holds at least one certificate rustls accepts as
//! a trust anchor. Expiry is only a warning: the file is often checked before
//! the certificate is renewed, and the engine still serves it.
//!
//! Messages name files as written in the configuration and never quote a
//! file's contents: a key file is a secret.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use x509_parser::extensions::GeneralName;
use x509_parser::time::ASN1Time;

use crate::model::{CertKey, PemFile};
use crate::raw::S;
use crate::validate::Ctx;

/// Where relative paths start and what "now" is, for the files of one
/// configuration.
#[derive(Debug, Clone)]
pub(crate) struct Files {
    /// Directory relative paths are joined to; empty: the working directory.
    pub(crate) base: PathBuf,
    /// Seconds since the Unix epoch, for certificate validity.
    pub(crate) now: i64,
    /// Read no file at all: each one named reports as unreadable (text from
    /// an untrusted source, such as a fuzzer, must not make us open
    /// `/dev/stdin` or `/dev/zero`).
    pub(crate) offline: bool,
    /// Whether this process may set `IP_TRANSPARENT` (transparent mode):
    /// without it `source = "client"` is a warning.
    pub(crate) transparent_capable: bool,
}

impl Files {
    /// Files of a configuration read from `config_file`.
    pub(crate) fn beside(config_file: &Path) -> Files {
        Files {
            base: config_file.parent().map(Path::to_path_buf).unwrap_or_default(),
            now: unix_now(),
            offline: false,
            transparent_capable: transparent_capable(),
        }
    }

    /// Files of a configuration given as text: relative to the working directory.
    pub(crate) fn working_directory() -> Files {
        Files { base: PathBuf::new(), now: unix_now(), offline: false, transparent_capable: transparent_capable() }
    }

    /// Files of a configuration checked without touching the file system.
    pub(crate) fn offline() -> Files {
        Files { base: PathBuf::new(), now: unix_now(), offline: true, transparent_capable: true }
    }

    fn relative_hint(&self) -> &'static str {
        if self.base.as_os_str().is_empty() {
            "a relative path is relative to switchyard's working directory"
        } else {
            "a relative path is relative to the directory of the configuration file"
        }
    }
}

/// CAP_NET_ADMIN (12) or CAP_NET_RAW (13) in this process's effective set,
/// read from `/proc/self/status`; where that cannot be read (not Linux), the
/// answer is yes: no warning without evidence.
fn transparent_capable() -> bool {
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else { return true };
    let Some(hex) = status.lines().find_map(|l| l.strip_prefix("CapEff:")) else { return true };
    u64::from_str_radix(hex.trim(), 16).map_or(true, |caps| caps & (1 << 12 | 1 << 13) != 0)
}

fn unix_now() -> i64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    i64::try_from(since.as_secs()).unwrap_or(i64::MAX)
}

/// Reads the file `path` names (the value of `key`), reporting an empty path
/// or an unreadable file.
pub(crate) fn read_pem(cx: &mut Ctx<'_, '_>, key: &str, path: &S<String>) -> Option<PemFile> {
    let written = path.get_ref();
    if written.is_empty() {
        cx.r.error(&path.span(), format!("`{key}` must not be empty"));
        return None;
    }
    let read = if cx.files.offline {
        Err(std::io::Error::other("files are not read in an offline check"))
    } else {
        std::fs::read(cx.files.base.join(written))
    };
    match read {
        Ok(pem) => Some(PemFile { path: PathBuf::from(written), pem }),
        Err(e) => {
            let hint = cx.files.relative_hint();
            cx.r.error_hint(&path.span(), format!("cannot read `{key}` file `{written}`: {e}"), hint);
            None
        }
    }
}

/// The certificates of a PEM file, in order; at least one.
fn certificates(cx: &mut Ctx<'_, '_>, path: &S<String>, file: &PemFile) -> Option<Vec<CertificateDer<'static>>> {
    let mut chain = Vec::new();
    for item in CertificateDer::pem_slice_iter(&file.pem) {
        match item {
            Ok(cert) => chain.push(cert),
            Err(e) => {
                cx.r.error(&path.span(), format!("`{}` is not valid PEM: {}", path.get_ref(), pem_reason(&e)));
                return None;
            }
        }
    }
    if chain.is_empty() {
        cx.r.error_hint(
            &path.span(),
            format!("no PEM certificate in `{}`", path.get_ref()),
            "a certificate file holds `-----BEGIN CERTIFICATE-----` blocks, the server's own certificate first",
        );
        return None;
    }
    Some(chain)
}

/// Why a PEM file could not be read, without quoting it.
fn pem_reason(e: &pem::Error) -> &'static str {
    match e {
        pem::Error::MissingSectionEnd { .. } => "a section has no END line",
        pem::Error::IllegalSectionStart { .. } => "a BEGIN line is malformed",
        pem::Error::Base64Decode(_) => "a section is not valid base64",
        pem::Error::SectionTooLarge => "a section is too large",
        _ => "it cannot be parsed",
    }
}

fn private_key(cx: &mut Ctx<'_, '_>, path: &S<String>, file: &PemFile) -> Option<PrivateKeyDer<'static>> {
    match PrivateKeyDer::from_pem_slice(&file.pem) {
        Ok(key) => Some(key),
        Err(pem::Error::NoItemsFound) => {
            cx.r.error_hint(
                &path.span(),
                format!("no private key in `{}`", path.get_ref()),
                "a key file holds a `-----BEGIN PRIVATE KEY-----` (PKCS#8), `BEGIN RSA PRIVATE KEY` (PKCS#1) or \
                 `BEGIN EC PRIVATE KEY` (SEC1) block; an encrypted key must be decrypted first",
            );
            None
        }
        Err(e) => {
            cx.r.error(&path.span(), format!("`{}` is not valid PEM: {}", path.get_ref(), pem_reason(&e)));
            None
        }
    }
}

/// Reads and checks a certificate chain and its key (see the module doc).
pub(crate) fn cert_key(cx: &mut Ctx<'_, '_>, cert: &S<String>, key: &S<String>) -> Option<CertKey> {
    let cert_file = read_pem(cx, "certificate", cert);
    let key_file = read_pem(cx, "key", key);
    let chain = cert_file.as_ref().and_then(|f| certificates(cx, cert, f));
    let key_der = key_file.as_ref().and_then(|f| private_key(cx, key, f));
    let names = chain.as_ref().and_then(|c| leaf_names(cx, cert, &c[0]));
    let (Some(chain), Some(key_der)) = (chain, key_der) else { return None };
    let signing_key = match rustls::crypto::aws_lc_rs::sign::any_supported_type(&key_der) {
        Ok(k) => k,
        Err(e) => {
            cx.r.error_hint(
                &key.span(),
                format!("the key in `{}` cannot be used: {e}", key.get_ref()),
                "supported keys are RSA (2048 bits or more), ECDSA P-256 and P-384, and Ed25519",
            );
            return None;
        }
    };
    match rustls::sign::CertifiedKey::new(chain, Arc::clone(&signing_key)).keys_match() {
        Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => {}
        Err(rustls::Error::InconsistentKeys(_)) => {
            cx.r.error_hint(
                &key.span(),
                format!("the key in `{}` does not match the certificate in `{}`", key.get_ref(), cert.get_ref()),
                "the key must be the private key of the first certificate in the certificate file",
            );
            return None;
        }
        Err(e) => {
            cx.r.error(&cert.span(), format!("the certificate in `{}` cannot be used: {e}", cert.get_ref()));
            return None;
        }
    }
    Some(CertKey { certificate: cert_file?, key: key_file?, names: names? })
}

/// The DNS names of a leaf certificate (subject alternative names, else the
/// subject's common name), warning when it is outside its validity period.
fn leaf_names(cx: &mut Ctx<'_, '_>, path: &S<String>, leaf: &CertificateDer<'_>) -> Option<Vec<String>> {
    let cert = match x509_parser::parse_x509_certificate(leaf) {
        Ok((_, cert)) => cert,
        Err(e) => {
            cx.r.error(&path.span(), format!("the first certificate in `{}` cannot be parsed: {e}", path.get_ref()));
            return None;
        }
    };
    let validity = cert.validity();
    if validity.not_after.timestamp() < cx.files.now {
        cx.r.warning(
            &path.span(),
            format!("the certificate in `{}` expired on {}", path.get_ref(), date(&validity.not_after)),
            Some("clients refuse an expired certificate: renew it".to_string()),
        );
    } else if validity.not_before.timestamp() > cx.files.now {
        cx.r.warning(
            &path.span(),
            format!("the certificate in `{}` is not valid before {}", path.get_ref(), date(&validity.not_before)),
            Some("clients refuse it until then; check the clock of the machine that issued it".to_string()),
        );
    }
    let san = match cert.subject_alternative_name() {
        Ok(san) => san,
        Err(e) => {
            cx.r.error(
                &path.span(),
                format!("the certificate in `{}` has a broken subjectAltName: {e}", path.get_ref()),
            );
            return None;
        }
    };
    let names = match san {
        Some(san) => san
            .value
            .general_names
            .iter()
            .filter_map(|n| match n {
                GeneralName::DNSName(name) => Some(name.to_ascii_lowercase()),
                _ => None,
            })
            .collect(),
        None => {
            cert.subject().iter_common_name().filter_map(|cn| cn.as_str().ok()).map(str::to_ascii_lowercase).collect()
        }
    };
    Some(names)
}

fn date(time: &ASN1Time) -> String {
    let t = time.to_datetime();
    format!("{} {:02}:{:02}:{:02} UTC", t.date(), t.hour(), t.minute(), t.second())
}

/// Reads a CA file: at least one certificate, each usable as a trust anchor.
pub(crate) fn ca_file(cx: &mut Ctx<'_, '_>, path: &S<String>) -> Option<PemFile> {
    let file = read_pem(cx, "ca", path)?;
    let chain = certificates(cx, path, &file)?;
    let mut store = rustls::RootCertStore::empty();
    for (i, cert) in chain.into_iter().enumerate() {
        if let Err(e) = store.add(cert) {
            cx.r.error(
                &path.span(),
                format!("certificate {} in `{}` cannot be used as a CA: {e}", i + 1, path.get_ref()),
            );
            return None;
        }
    }
    Some(file)
}
