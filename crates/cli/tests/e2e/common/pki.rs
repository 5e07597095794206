//! A test certificate authority (rcgen): a CA and the leaf certificates it signs, as PEM.

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};

/// A CA and what it signed, as PEM.
pub struct Pki {
    /// The CA certificate.
    pub ca: String,
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl Pki {
    pub fn new(name: &str) -> Pki {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().expect("key")).expect("CA");
        Pki { ca: issuer.pem(), issuer }
    }

    /// A leaf certificate for `names` (DNS names or IP literals): (chain PEM, key PEM).
    pub fn leaf(&self, names: &[&str]) -> (String, String) {
        let key = KeyPair::generate().expect("key");
        let mut params =
            CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).expect("params");
        params.distinguished_name.push(DnType::CommonName, names.first().copied().unwrap_or("leaf"));
        let cert = params.signed_by(&key, &self.issuer).expect("sign");
        (cert.pem(), key.serialize_pem())
    }
}
