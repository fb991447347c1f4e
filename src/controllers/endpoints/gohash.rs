//! The sort key upstream orders Endpoints ports and subsets by: the MD5 of a Go value as
//! `hashutil.DeepHashObject` prints it (go-spew's `%#v` with types, sorted keys, no pointer
//! addresses). Only the shapes of `v1.EndpointPort` and `v1.EndpointSubset` are printed here,
//! field for field as the Go structs declare them, so the order (and so the object written)
//! is upstream's byte for byte.

use super::subsets::{Address, Port, Subset};

/// MD5 (RFC 1321) of `data`. A sort key, not a security measure.
pub fn md5(data: &[u8]) -> [u8; 16] {
    const S: [u32; 64] = [
        7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 5, 9, 14, 20, 5, 9, 14, 20, 5,
        9, 14, 20, 5, 9, 14, 20, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 6, 10,
        15, 21, 6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21,
    ];
    let k: [u32; 64] =
        std::array::from_fn(|i| ((i as f64 + 1.0).sin().abs() * 4_294_967_296.0) as u32);
    let mut h: [u32; 4] = [0x6745_2301, 0xefcd_ab89, 0x98ba_dcfe, 0x1032_5476];
    let mut msg = data.to_vec();
    let bit_len = (data.len() as u64).wrapping_mul(8);
    msg.push(0x80);
    while msg.len() % 64 != 56 {
        msg.push(0);
    }
    msg.extend_from_slice(&bit_len.to_le_bytes());
    for chunk in msg.chunks_exact(64) {
        let m: [u32; 16] = std::array::from_fn(|i| {
            u32::from_le_bytes([
                chunk[4 * i],
                chunk[4 * i + 1],
                chunk[4 * i + 2],
                chunk[4 * i + 3],
            ])
        });
        let [mut a, mut b, mut c, mut d] = h;
        for i in 0..64 {
            let (f, g) = match i / 16 {
                0 => ((b & c) | (!b & d), i),
                1 => ((d & b) | (!d & c), (5 * i + 1) % 16),
                2 => (b ^ c ^ d, (3 * i + 5) % 16),
                _ => (c ^ (b | !d), (7 * i) % 16),
            };
            let f = f.wrapping_add(a).wrapping_add(k[i]).wrapping_add(m[g]);
            a = d;
            d = c;
            c = b;
            b = b.wrapping_add(f.rotate_left(S[i]));
        }
        h[0] = h[0].wrapping_add(a);
        h[1] = h[1].wrapping_add(b);
        h[2] = h[2].wrapping_add(c);
        h[3] = h[3].wrapping_add(d);
    }
    let mut out = [0u8; 16];
    for (i, w) in h.iter().enumerate() {
        out[4 * i..4 * i + 4].copy_from_slice(&w.to_le_bytes());
    }
    out
}

fn opt_str(out: &mut String, v: Option<&str>) {
    out.push_str("(*string)");
    out.push_str(v.unwrap_or("<nil>"));
}

/// The fields of a `v1.EndpointPort` (inside braces).
fn port_fields(out: &mut String, p: &Port) {
    out.push_str("{Name:(string)");
    out.push_str(&p.name);
    out.push_str(" Port:(int32)");
    out.push_str(&p.port.to_string());
    out.push_str(" Protocol:(v1.Protocol)");
    out.push_str(&p.protocol);
    out.push_str(" AppProtocol:");
    opt_str(out, p.app_protocol.as_deref());
    out.push('}');
}

fn address_fields(out: &mut String, a: &Address) {
    out.push_str("{IP:(string)");
    out.push_str(&a.ip);
    out.push_str(" Hostname:(string)");
    out.push_str(&a.hostname);
    out.push_str(" NodeName:");
    opt_str(out, a.node_name.as_deref());
    out.push_str(" TargetRef:(*v1.ObjectReference)");
    match &a.target {
        None => out.push_str("<nil>"),
        Some(t) => {
            for (i, (name, ty, v)) in [
                ("Kind", "string", &t.kind),
                ("Namespace", "string", &t.namespace),
                ("Name", "string", &t.name),
                ("UID", "types.UID", &t.uid),
                ("APIVersion", "string", &t.api_version),
                ("ResourceVersion", "string", &t.resource_version),
                ("FieldPath", "string", &t.field_path),
            ]
            .into_iter()
            .enumerate()
            {
                out.push_str(if i == 0 { "{" } else { " " });
                out.push_str(name);
                out.push_str(":(");
                out.push_str(ty);
                out.push(')');
                out.push_str(v);
            }
            out.push('}');
        }
    }
    out.push('}');
}

/// A slice field: `([]T)<nil>` when empty (repacked subsets never hold empty non-nil
/// slices), else `([]T)[e1 e2]`.
fn slice<T>(out: &mut String, ty: &str, items: &[T], each: impl Fn(&mut String, &T)) {
    out.push_str("([]");
    out.push_str(ty);
    out.push(')');
    if items.is_empty() {
        out.push_str("<nil>");
        return;
    }
    out.push('[');
    for (i, x) in items.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        each(out, x);
    }
    out.push(']');
}

/// `DeepHashObject` of a `v1.EndpointPort`, as printed before hashing.
pub fn port_text(p: &Port) -> String {
    let mut s = String::from("(v1.EndpointPort)");
    port_fields(&mut s, p);
    s
}

/// `DeepHashObject` of a `v1.EndpointSubset`, as printed before hashing.
pub fn subset_text(sub: &Subset) -> String {
    let mut s = String::from("(v1.EndpointSubset){Addresses:");
    slice(&mut s, "v1.EndpointAddress", &sub.addresses, address_fields);
    s.push_str(" NotReadyAddresses:");
    slice(&mut s, "v1.EndpointAddress", &sub.not_ready, address_fields);
    s.push_str(" Ports:");
    slice(&mut s, "v1.EndpointPort", &sub.ports, port_fields);
    s.push('}');
    s
}

pub fn port_hash(p: &Port) -> [u8; 16] {
    md5(port_text(p).as_bytes())
}

pub fn subset_hash(s: &Subset) -> [u8; 16] {
    md5(subset_text(s).as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(b: [u8; 16]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    #[test]
    fn md5_vectors() {
        assert_eq!(hex(md5(b"")), "d41d8cd98f00b204e9800998ecf8427e");
        assert_eq!(hex(md5(b"abc")), "900150983cd24fb0d6963f7d28e17f72");
        assert_eq!(
            hex(md5(
                b"12345678901234567890123456789012345678901234567890123456789012345678901234567890"
            )),
            "57edf4a22be3c955ac49da2e2107b67a"
        );
    }
}
