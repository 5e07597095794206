//! One issuance with `instant-acme`: the account (created once, then read
//! from disk), a new order for the domains, one challenge per pending
//! authorization answered by switchyard itself ([`Challenges`]), the
//! finalisation with a fresh ECDSA P-256 key, and the chain.
//!
//! The challenge answers are withdrawn when the issuance ends, whatever its
//! outcome ([`Offered`]'s `Drop`).

use std::sync::Arc;
use std::time::Duration;

use instant_acme::{
    Account, AccountCredentials, AuthorizationStatus, CertificateIdentifier, ChallengeType, Identifier, NewAccount,
    NewOrder, OrderStatus, RetryPolicy,
};
use rcgen::{CertificateParams, CustomExtension, DistinguishedName, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::sign::CertifiedKey;
use switchyard_config::{Acme, AcmeChallenge};

use super::store::{self, Paths};
use super::Challenges;

/// How long an order may take to become ready, then valid.
const ORDER_TIMEOUT: Duration = Duration::from_secs(90);

/// A certificate chain (PEM, leaf first) and its key (PKCS#8 PEM).
pub struct Issued {
    /// The chain.
    pub chain_pem: String,
    /// The key.
    pub key_pem: String,
}

/// The account of `acme`: read from its credentials file, else created on
/// the server (terms of service agreed) and its credentials stored.
pub async fn account(acme: &Acme, paths: &Paths) -> Result<Account, String> {
    let builder = match &acme.ca_roots {
        Some(roots) => {
            let copy = paths.ca_roots();
            store::write_private(&copy, &roots.pem).map_err(|e| format!("cannot write {}: {e}", copy.display()))?;
            Account::builder_with_root(&copy)
        }
        None => Account::builder(),
    }
    .map_err(|e| format!("ACME client: {e}"))?;
    let stored = store::read(&paths.account).map_err(|e| format!("cannot read {}: {e}", paths.account.display()))?;
    if let Some(json) = stored {
        let credentials: AccountCredentials = serde_json::from_slice(&json)
            .map_err(|e| format!("{}: not account credentials ({e})", paths.account.display()))?;
        return builder.from_credentials(credentials).await.map_err(|e| format!("account: {e}"));
    }
    let contact: Vec<&str> = acme.contact.iter().map(String::as_str).collect();
    let new = NewAccount { contact: &contact, terms_of_service_agreed: true, only_return_existing: false };
    let (account, credentials) =
        builder.create(&new, acme.directory.clone(), None).await.map_err(|e| format!("new account: {e}"))?;
    let json = serde_json::to_vec(&credentials).map_err(|e| format!("account credentials: {e}"))?;
    store::write_private(&paths.account, &json)
        .map_err(|e| format!("cannot write {}: {e}", paths.account.display()))?;
    tracing::info!(account = account.id(), directory = %acme.directory, "ACME account created");
    Ok(account)
}

/// Orders, validates and fetches a certificate for `acme`'s domains.
/// `replaces`: the certificate it renews, when the server offers ARI.
pub async fn issue(
    account: &Account,
    acme: &Acme,
    challenges: &Arc<Challenges>,
    replaces: Option<CertificateIdentifier<'static>>,
) -> Result<Issued, String> {
    let identifiers: Vec<Identifier> = acme.domains.iter().map(|d| Identifier::Dns(d.clone())).collect();
    let mut new = NewOrder::new(&identifiers);
    if let Some(profile) = &acme.profile {
        new = new.profile(profile);
    }
    if let Some(id) = replaces {
        new = new.replaces(id);
    }
    let mut order = account.new_order(&new).await.map_err(|e| format!("new order: {e}"))?;
    let mut offered = Offered { challenges: challenges.clone(), tokens: Vec::new(), domains: Vec::new() };
    let kind = match acme.challenge {
        AcmeChallenge::Http01 => ChallengeType::Http01,
        AcmeChallenge::TlsAlpn01 => ChallengeType::TlsAlpn01,
    };
    let mut authorizations = order.authorizations();
    while let Some(authz) = authorizations.next().await {
        let mut authz = authz.map_err(|e| format!("authorization: {e}"))?;
        match authz.status {
            AuthorizationStatus::Pending => {}
            AuthorizationStatus::Valid => continue,
            other => return Err(format!("authorization for {} is {other:?}", authz.identifier())),
        }
        let domain = authz.identifier().to_string();
        let mut challenge = authz
            .challenge(kind.clone())
            .ok_or_else(|| format!("the server offers no {} challenge for {domain}", acme.challenge.name()))?;
        let key_authorization = challenge.key_authorization();
        match acme.challenge {
            AcmeChallenge::Http01 => {
                challenges.offer_http01(&challenge.token, key_authorization.as_str());
                offered.tokens.push(challenge.token.clone());
            }
            AcmeChallenge::TlsAlpn01 => {
                let cert = alpn_certificate(&domain, key_authorization.digest().as_ref())?;
                challenges.offer_alpn01(&domain, cert);
                offered.domains.push(domain.clone());
            }
        }
        challenge.set_ready().await.map_err(|e| format!("challenge for {domain}: {e}"))?;
    }
    let retries = RetryPolicy::new().timeout(ORDER_TIMEOUT);
    let status = order.poll_ready(&retries).await.map_err(|e| format!("order: {e}"))?;
    if status != OrderStatus::Ready {
        let why = order.state().error.as_ref().map_or_else(|| format!("{status:?}"), |p| p.to_string());
        return Err(format!("order not ready: {why}"));
    }
    drop(offered);
    let key = KeyPair::generate().map_err(|e| format!("key: {e}"))?;
    let mut params = CertificateParams::new(acme.domains.clone()).map_err(|e| format!("CSR: {e}"))?;
    params.distinguished_name = DistinguishedName::new();
    let csr = params.serialize_request(&key).map_err(|e| format!("CSR: {e}"))?;
    order.finalize_csr(csr.der()).await.map_err(|e| format!("finalize: {e}"))?;
    let chain_pem = order.poll_certificate(&retries).await.map_err(|e| format!("certificate: {e}"))?;
    Ok(Issued { chain_pem, key_pem: key.serialize_pem() })
}

/// The tls-alpn-01 certificate for `domain` (RFC 8737 3): self-signed, the
/// domain as its only name, the key authorization's SHA-256 digest in a
/// critical acmeIdentifier extension.
pub fn alpn_certificate(domain: &str, digest: &[u8]) -> Result<Arc<CertifiedKey>, String> {
    if digest.len() != 32 {
        return Err("the key authorization digest is not SHA-256".into());
    }
    let key = KeyPair::generate().map_err(|e| format!("challenge key: {e}"))?;
    let mut params = CertificateParams::new(vec![domain.to_string()]).map_err(|e| format!("challenge: {e}"))?;
    params.custom_extensions = vec![CustomExtension::new_acme_identifier(digest)];
    let cert = params.self_signed(&key).map_err(|e| format!("challenge certificate: {e}"))?;
    let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    // Not `CertifiedKey::from_der`: its consistency check parses the
    // certificate with webpki, which refuses the critical acmeIdentifier
    // extension it does not know. The key is the one just signed with.
    let provider = rustls::crypto::aws_lc_rs::default_provider();
    let signing = provider.key_provider.load_private_key(der).map_err(|e| format!("challenge key: {e}"))?;
    Ok(Arc::new(CertifiedKey::new(vec![cert.der().clone()], signing)))
}

/// A rustls certified key from a chain and its key.
pub fn certified(
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
) -> Result<Arc<CertifiedKey>, String> {
    let provider = rustls::crypto::aws_lc_rs::default_provider();
    CertifiedKey::from_der(chain, key, &provider).map(Arc::new).map_err(|e| format!("certificate and key: {e}"))
}

/// Withdraws the challenge answers of one issuance when dropped.
struct Offered {
    challenges: Arc<Challenges>,
    tokens: Vec<String>,
    domains: Vec<String>,
}

impl Drop for Offered {
    fn drop(&mut self) {
        for token in &self.tokens {
            self.challenges.withdraw_http01(token);
        }
        for domain in &self.domains {
            self.challenges.withdraw_alpn01(domain);
        }
    }
}
