//! Go's behaviour where upstream's output or errors must be matched byte for byte, one job a
//! file: `strconv.Quote` (`quote`), values in Go's spelling and `time.ParseDuration`
//! (`parse`), `encoding/json`'s output (`json`), RFC 3339 as `metav1.Time` writes it
//! (`timefmt`), `net.ParseCIDR`'s networks (`cidr`), `resource.Quantity` (`quantity`) and
//! JSON Web Signatures as Go JOSE writes them (`jws`).

pub mod cidr;
pub mod json;
pub mod jws;
pub mod parse;
pub mod quantity;
pub mod quote;
pub mod timefmt;
