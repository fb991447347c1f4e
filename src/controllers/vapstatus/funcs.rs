//! The overloads of CEL's standard operators and of the functions the checker models, and
//! their resolution as cel-go's checker does it (type parameters, `dyn` accepted everywhere,
//! `null` accepted where a message, timestamp or duration is asked for). A function not
//! listed here has an unknown result and is never reported.

use super::types::Ty;

/// One overload: receiver style, parameter types, result.
pub struct Overload {
    pub member: bool,
    pub params: Vec<Ty>,
    pub result: Ty,
}

fn o(params: Vec<Ty>, result: Ty) -> Overload {
    Overload {
        member: false,
        params,
        result,
    }
}

fn m(params: Vec<Ty>, result: Ty) -> Overload {
    Overload {
        member: true,
        params,
        result,
    }
}

const A: Ty = Ty::Param(0);
const B: Ty = Ty::Param(1);

fn numeric() -> [Ty; 3] {
    [Ty::Int, Ty::Uint, Ty::Double]
}

/// The overloads of `name`, None for a function not modelled.
pub fn overloads(name: &str) -> Option<Vec<Overload>> {
    use Ty::*;
    let same = |ts: &[Ty], result: Option<Ty>| -> Vec<Overload> {
        ts.iter()
            .map(|t| {
                o(
                    vec![t.clone(), t.clone()],
                    result.clone().unwrap_or(t.clone()),
                )
            })
            .collect()
    };
    Some(match name {
        "_==_" | "_!=_" => vec![o(vec![A, A], Bool)],
        "_<_" | "_<=_" | "_>_" | "_>=_" => {
            let mut v = same(&[Bool, String, Bytes, Timestamp, Duration], Some(Bool));
            for a in numeric() {
                for b in numeric() {
                    v.push(o(vec![a.clone(), b], Bool));
                }
            }
            v
        }
        "_+_" => {
            let mut v = same(&[Int, Uint, Double, String, Bytes], None);
            v.push(o(vec![Ty::list(A), Ty::list(A)], Ty::list(A)));
            v.push(o(vec![Timestamp, Duration], Timestamp));
            v.push(o(vec![Duration, Timestamp], Timestamp));
            v.push(o(vec![Duration, Duration], Duration));
            v
        }
        "_-_" => {
            let mut v = same(&[Int, Uint, Double], None);
            v.push(o(vec![Timestamp, Timestamp], Duration));
            v.push(o(vec![Timestamp, Duration], Timestamp));
            v.push(o(vec![Duration, Duration], Duration));
            v
        }
        "_*_" | "_/_" => same(&[Int, Uint, Double], None),
        "_%_" => same(&[Int, Uint], None),
        "-_" => vec![o(vec![Int], Int), o(vec![Double], Double)],
        "!_" => vec![o(vec![Bool], Bool)],
        "_?_:_" => vec![o(vec![Bool, A, A], A)],
        "_[_]" => vec![o(vec![Ty::list(A), Int], A), o(vec![Ty::map(A, B), A], B)],
        "@in" => vec![
            o(vec![A, Ty::list(A)], Bool),
            o(vec![A, Ty::map(A, B)], Bool),
        ],
        "size" => {
            let mut v = Vec::new();
            for t in [String, Bytes, Ty::list(A), Ty::map(A, B)] {
                v.push(o(vec![t.clone()], Int));
                v.push(m(vec![t], Int));
            }
            v
        }
        "contains" | "startsWith" | "endsWith" | "matches" => vec![m(vec![String, String], Bool)],
        // Kubernetes' string (`ext.Strings` v2) and regex libraries.
        "lowerAscii" | "upperAscii" | "trim" => vec![m(vec![String], String)],
        "charAt" => vec![m(vec![String, Int], String)],
        "replace" => vec![
            m(vec![String, String, String], String),
            m(vec![String, String, String, Int], String),
        ],
        "split" => vec![
            m(vec![String, String], Ty::list(String)),
            m(vec![String, String, Int], Ty::list(String)),
        ],
        "substring" => vec![
            m(vec![String, Int], String),
            m(vec![String, Int, Int], String),
        ],
        "join" => vec![
            m(vec![Ty::list(String)], String),
            m(vec![Ty::list(String), String], String),
        ],
        "find" => vec![m(vec![String, String], String)],
        "findAll" => vec![
            m(vec![String, String], Ty::list(String)),
            m(vec![String, String, Int], Ty::list(String)),
        ],
        _ => return None,
    })
}

/// Functions whose result type is known for the arguments listed, but whose overloads are
/// not all listed: a call that matches gets the result type, one that does not is unknown
/// and not reported. `indexOf`/`lastIndexOf` (strings and lists), `isSorted` and the
/// conversions.
pub fn typed_only(name: &str) -> Option<Vec<Overload>> {
    use Ty::*;
    let conv = |to: Ty, from: &[Ty]| -> Vec<Overload> {
        from.iter()
            .map(|f| o(vec![f.clone()], to.clone()))
            .collect()
    };
    Some(match name {
        "indexOf" | "lastIndexOf" => vec![
            m(vec![String, String], Int),
            m(vec![String, String, Int], Int),
            m(vec![Ty::list(A), A], Int),
        ],
        "isSorted" => vec![m(vec![Ty::list(A)], Bool)],
        "int" => conv(Int, &[Int, Uint, Double, String, Timestamp]),
        "uint" => conv(Uint, &[Int, Uint, Double, String]),
        "double" => conv(Double, &[Int, Uint, Double, String]),
        "string" => conv(
            String,
            &[Int, Uint, Double, Bool, Bytes, String, Timestamp, Duration],
        ),
        "bool" => conv(Bool, &[Bool, String]),
        "bytes" => conv(Bytes, &[Bytes, String]),
        "timestamp" => conv(Timestamp, &[String, Timestamp]),
        "duration" => conv(Duration, &[String, Duration]),
        _ => return None,
    })
}

/// Type parameter bindings while one overload is tried.
#[derive(Default, Clone)]
pub struct Bindings(Vec<Option<Ty>>);

impl Bindings {
    fn get(&self, i: u8) -> Option<&Ty> {
        self.0.get(i as usize).and_then(Option::as_ref)
    }

    fn set(&mut self, i: u8, t: Ty) {
        let i = i as usize;
        if self.0.len() <= i {
            self.0.resize(i + 1, None);
        }
        self.0[i] = Some(t);
    }

    /// The type with its parameters replaced (unbound ones by `dyn`).
    pub fn subst(&self, t: &Ty) -> Ty {
        match t {
            Ty::Param(i) => self.get(*i).cloned().unwrap_or(Ty::Dyn),
            Ty::List(e) => Ty::list(self.subst(e)),
            Ty::Map(k, v) => Ty::map(self.subst(k), self.subst(v)),
            other => other.clone(),
        }
    }
}

/// Whether `null` goes where `t` is asked for (cel-go's legacy nullable kinds).
fn nullable(t: &Ty) -> bool {
    matches!(t, Ty::Null | Ty::Obj(_) | Ty::Timestamp | Ty::Duration)
}

/// Whether a value of type `actual` is accepted for `formal`, binding parameters.
pub fn assignable(b: &mut Bindings, actual: &Ty, formal: &Ty) -> bool {
    if let Ty::Param(i) = formal {
        return match b.get(*i).cloned() {
            None => {
                b.set(*i, actual.clone());
                true
            }
            Some(bound) => {
                let mut probe = b.clone();
                if assignable(&mut probe, actual, &bound) {
                    *b = probe;
                    true
                } else if assignable(&mut b.clone(), &bound, actual) {
                    b.set(*i, actual.clone());
                    true
                } else {
                    false
                }
            }
        };
    }
    if actual.is_wild() || formal.is_wild() {
        return true;
    }
    if *actual == Ty::Null {
        return nullable(formal);
    }
    if *formal == Ty::Null {
        return nullable(actual);
    }
    match (actual, formal) {
        (Ty::List(a), Ty::List(f)) => assignable(b, a, f),
        (Ty::Map(ak, av), Ty::Map(fk, fv)) => assignable(b, ak, fk) && assignable(b, av, fv),
        (Ty::Obj(a), Ty::Obj(f)) => a.name == f.name,
        (a, f) => {
            std::mem::discriminant(a) == std::mem::discriminant(f)
                && !matches!(a, Ty::List(_) | Ty::Map(..) | Ty::Obj(_))
        }
    }
}

/// What a call resolves to: its result type, or None when no overload takes these
/// arguments (`args` with the receiver first for a member call).
pub fn resolve(overloads: &[Overload], member: bool, args: &[Ty]) -> Option<Ty> {
    let mut result: Option<Ty> = None;
    for ov in overloads.iter().filter(|ov| ov.member == member) {
        if ov.params.len() != args.len() {
            continue;
        }
        let mut b = Bindings::default();
        if args
            .iter()
            .zip(&ov.params)
            .all(|(a, f)| assignable(&mut b, a, f))
        {
            let r = b.subst(&ov.result);
            result = Some(match result {
                None => r,
                Some(prev) if prev == Ty::Dyn || prev == r => prev,
                Some(_) => Ty::Dyn,
            });
        }
    }
    result
}
