//! Reading certificates and keys: just enough DER (`der`), a certificate's public key without
//! webpki (`spki`), and PEM files read the way Go and client-go read them, with their error
//! words (`gopem`). `certs` writes certificates with these; the API client and the secure
//! port read them.

pub mod der;
pub mod gopem;
pub mod spki;
