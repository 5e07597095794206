//! ACME material on disk, under a service's `storage` directory:
//!
//! ```text
//! <storage>/                              0700
//!   ca_roots.pem                          0600  copy of `ca_roots`, for the ACME client
//!   <server>/                             0700  one per directory URL (host and path, made a file name)
//!     account.json                        0600  account credentials (key and URL)
//!     <first domain>/                     0700
//!       key.pem                           0600  the certificate's private key (PKCS#8)
//!       chain.pem                         0600  the chain, leaf first
//! ```
//!
//! Files are written to a temporary name and renamed, so a crash never
//! leaves half a key; the key is written before the chain, so a chain on
//! disk always has its key.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use switchyard_config::Acme;

/// Paths of one managed certificate's files.
#[derive(Debug, Clone)]
pub struct Paths {
    /// `<storage>`
    pub root: PathBuf,
    /// The account credentials.
    pub account: PathBuf,
    /// The directory of the certificate and its key.
    pub cert_dir: PathBuf,
}

impl Paths {
    /// Where `acme`'s files live.
    pub fn of(acme: &Acme) -> Self {
        let server = acme.storage.join(file_name(&acme.directory));
        let first = acme.domains.first().map_or("certificate", String::as_str);
        Paths {
            root: acme.storage.clone(),
            account: server.join("account.json"),
            cert_dir: server.join(file_name(first)),
        }
    }

    /// The certificate's key.
    pub fn key(&self) -> PathBuf {
        self.cert_dir.join("key.pem")
    }

    /// The certificate chain.
    pub fn chain(&self) -> PathBuf {
        self.cert_dir.join("chain.pem")
    }

    /// The copy of the configured CA roots.
    pub fn ca_roots(&self) -> PathBuf {
        self.root.join("ca_roots.pem")
    }
}

/// A URL or name made a single path component: its scheme dropped, and
/// every byte but letters, digits, `.` and `-` replaced by `_`.
pub fn file_name(s: &str) -> String {
    let s = s.split_once("://").map_or(s, |(_, rest)| rest);
    let name: String =
        s.chars().map(|c| if c.is_ascii_alphanumeric() || c == '.' || c == '-' { c } else { '_' }).collect();
    match name.trim_start_matches('.') {
        "" => "_".to_string(),
        n => n.to_string(),
    }
}

/// Creates `dir` and its parents as needed, each created one 0700; an
/// existing `dir` is set to 0700.
pub fn private_dir(dir: &Path) -> std::io::Result<()> {
    fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
}

/// Writes `bytes` to `path` (mode 0600) through a temporary file and a rename.
pub fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        private_dir(dir)?;
    }
    let tmp = path.with_extension("tmp");
    let mut file = fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&tmp)?;
    file.set_permissions(fs::Permissions::from_mode(0o600))?;
    file.write_all(bytes)?;
    file.sync_all()?;
    fs::rename(&tmp, path)
}

/// Reads `path`; `Ok(None)` when it does not exist.
pub fn read(path: &Path) -> std::io::Result<Option<Vec<u8>>> {
    match fs::read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_one_safe_component() {
        assert_eq!(file_name("https://127.0.0.1:14000/dir"), "127.0.0.1_14000_dir");
        assert_eq!(file_name("https://../.."), "_..");
        assert_eq!(file_name(".."), "_");
        assert_eq!(file_name("a.example"), "a.example");
    }

    #[test]
    fn private_files_and_directories() {
        let base = std::env::temp_dir().join(format!("switchyard-acme-store-{}", std::process::id()));
        let file = base.join("a/b/key.pem");
        write_private(&file, b"secret").expect("write");
        let mode = |p: &Path| fs::metadata(p).expect("metadata").permissions().mode() & 0o777;
        assert_eq!(mode(&file), 0o600);
        assert_eq!(mode(&base.join("a/b")), 0o700);
        assert_eq!(read(&file).expect("read").as_deref(), Some(&b"secret"[..]));
        assert_eq!(read(&base.join("missing")).expect("read"), None);
        let _ = fs::remove_dir_all(&base);
    }
}
