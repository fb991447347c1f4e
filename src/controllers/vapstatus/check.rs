//! The type checker: an expression's type and cel-go's messages for what does not type, in
//! an environment of typed variables (`object`, `oldObject`, `params`, `request`,
//! `variables`, ...). Messages are cel-go's and are given only where cel-go gives the same
//! one; where this checker cannot know a type (a function it does not model) the type is
//! unknown and nothing about it is reported.

use super::funcs::{self, Bindings};
use super::parse::{Expr, Lit, Node};
use super::types::{self, format, Ty};
use std::collections::HashMap;

/// One message: where (character offset) and what.
#[derive(Debug, Clone, PartialEq)]
pub struct Issue {
    pub pos: usize,
    pub msg: String,
}

pub struct Checker<'a> {
    pub vars: &'a HashMap<String, Ty>,
    scopes: Vec<(String, Ty)>,
    pub issues: Vec<Issue>,
}

fn lit_ty(l: &Lit) -> Ty {
    match l {
        Lit::Int => Ty::Int,
        Lit::Uint => Ty::Uint,
        Lit::Double => Ty::Double,
        Lit::Str(_) => Ty::String,
        Lit::Bytes => Ty::Bytes,
        Lit::Bool => Ty::Bool,
        Lit::Null => Ty::Null,
    }
}

/// cel-go's `isEqualOrLessSpecific`: `dyn` (or a parameter) is less specific than anything.
fn less_specific(a: &Ty, b: &Ty) -> bool {
    match (a, b) {
        (Ty::Dyn | Ty::Param(_), _) => true,
        (_, Ty::Dyn | Ty::Param(_)) => false,
        (Ty::List(x), Ty::List(y)) => less_specific(x, y),
        (Ty::Map(k1, v1), Ty::Map(k2, v2)) => less_specific(k1, k2) && less_specific(v1, v2),
        (x, y) => std::mem::discriminant(x) == std::mem::discriminant(y),
    }
}

impl<'a> Checker<'a> {
    pub fn new(vars: &'a HashMap<String, Ty>) -> Self {
        Checker {
            vars,
            scopes: Vec::new(),
            issues: Vec::new(),
        }
    }

    fn report(&mut self, pos: usize, msg: String) {
        self.issues.push(Issue { pos, msg });
    }

    fn lookup(&self, name: &str) -> Option<Ty> {
        if let Some((_, t)) = self.scopes.iter().rev().find(|(n, _)| n == name) {
            return Some(t.clone());
        }
        self.vars.get(name).cloned()
    }

    pub fn check(&mut self, e: &Expr) -> Ty {
        match &e.node {
            Node::Lit(l) => lit_ty(l),
            // Undeclared names are refused by the API server before they are stored.
            Node::Ident(n) => self.lookup(n).unwrap_or(Ty::Unknown),
            Node::Select {
                operand,
                field,
                optional,
            } => {
                if *optional {
                    self.check(operand);
                    return Ty::Unknown;
                }
                let t = self.check(operand);
                self.select(e.pos, &t, field)
            }
            Node::List(items) => {
                let mut elem = None;
                for i in items {
                    let t = self.check(i);
                    elem = Some(self.join(i.pos, elem, t));
                }
                Ty::list(elem.unwrap_or(Ty::Dyn))
            }
            Node::Map(entries) => {
                let (mut kt, mut vt) = (None, None);
                for (k, v) in entries {
                    let t = self.check(k);
                    kt = Some(self.join(k.pos, kt, t));
                    let t = self.check(v);
                    vt = Some(self.join(v.pos, vt, t));
                }
                Ty::map(kt.unwrap_or(Ty::Dyn), vt.unwrap_or(Ty::Dyn))
            }
            Node::Struct => Ty::Unknown,
            Node::Call { target, func, args } => self.call(e.pos, target.as_deref(), func, args),
        }
    }

    /// `joinTypes`: the element type of a list or map literal so far and the next entry's:
    /// the more general of the two, or a message at the entry when they do not agree.
    fn join(&mut self, pos: usize, prev: Option<Ty>, cur: Ty) -> Ty {
        let Some(prev) = prev else { return cur };
        if prev.has_unknown() || cur.has_unknown() {
            return Ty::Unknown;
        }
        if funcs::assignable(&mut Bindings::default(), &cur, &prev) {
            return if less_specific(&prev, &cur) {
                prev
            } else {
                cur
            };
        }
        self.report(
            pos,
            format!(
                "expected type '{}' but found '{}'",
                format(&prev),
                format(&cur)
            ),
        );
        Ty::Error
    }

    /// `checkSelectField`.
    fn select(&mut self, pos: usize, t: &Ty, field: &str) -> Ty {
        match t {
            Ty::Map(_, v) => (**v).clone(),
            // `object.metadata.namespace` finds the escaped `__namespace__` (the API
            // server's type provider recognises keywords as field names).
            Ty::Obj(o) => match o.fields().get(field).or_else(|| {
                types::is_reserved(field)
                    .then(|| o.fields().get(&format!("__{field}__")))
                    .flatten()
            }) {
                Some(f) => f.clone(),
                None => {
                    self.report(pos, format!("undefined field '{field}'"));
                    Ty::Error
                }
            },
            Ty::Unknown => Ty::Unknown,
            t if t.is_wild() => Ty::Dyn,
            t => {
                self.report(
                    pos,
                    format!("type '{}' does not support field selection", format(t)),
                );
                Ty::Dyn
            }
        }
    }

    fn call(&mut self, pos: usize, target: Option<&Expr>, func: &str, args: &[Expr]) -> Ty {
        if let Some(t) = self.macro_call(pos, target, func, args) {
            return t;
        }
        if func == "_&&_" || func == "_||_" {
            let ts: Vec<Ty> = args.iter().map(|a| self.check(a)).collect();
            let mut ok = true;
            for (a, t) in args.iter().zip(&ts) {
                if !funcs::assignable(&mut Bindings::default(), t, &Ty::Bool) {
                    self.report(
                        a.pos,
                        format!("expected type 'bool' but found '{}'", format(t)),
                    );
                    ok = false;
                }
            }
            return if ok { Ty::Bool } else { Ty::Error };
        }
        let mut types = Vec::new();
        if let Some(t) = target {
            types.push(self.check(t));
        }
        for a in args {
            types.push(self.check(a));
        }
        // A namespaced function (`sets.contains`, `strings.quote`, `math.greatest`): the
        // receiver is no variable.
        if let Some(Node::Ident(n)) = target.map(|t| &t.node) {
            if self.lookup(n).is_none() {
                return Ty::Unknown;
            }
        }
        let Some(overloads) = funcs::overloads(func) else {
            return funcs::typed_only(func)
                .and_then(|o| funcs::resolve(&o, target.is_some(), &types))
                .filter(|t| !types.iter().any(Ty::has_unknown) || !t.is_wild())
                .unwrap_or(Ty::Unknown);
        };
        if types.iter().any(Ty::has_unknown) {
            return funcs::resolve(&overloads, target.is_some(), &types)
                .filter(|t| !t.is_wild())
                .unwrap_or(Ty::Unknown);
        }
        match funcs::resolve(&overloads, target.is_some(), &types) {
            Some(t) => t,
            None => {
                let shown: Vec<String> = types.iter().map(format).collect();
                let sig = if target.is_some() {
                    format!("{}.({})", shown[0], shown[1..].join(", "))
                } else {
                    format!("({})", shown.join(", "))
                };
                self.report(
                    pos,
                    format!("found no matching overload for '{func}' applied to '{sig}'"),
                );
                Ty::Error
            }
        }
    }

    /// The macros, typed as their expansions: None when the call is no macro.
    fn macro_call(
        &mut self,
        pos: usize,
        target: Option<&Expr>,
        func: &str,
        args: &[Expr],
    ) -> Option<Ty> {
        match (target, func, args.len()) {
            (None, "has", 1) => {
                if let Node::Select { operand, field, .. } = &args[0].node {
                    let t = self.check(operand);
                    // cel-go reports at the macro's position.
                    self.select(pos, &t, field);
                }
                Some(Ty::Bool)
            }
            (Some(t), "bind", 3) if matches!(&t.node, Node::Ident(n) if n == "cel") => {
                let Node::Ident(var) = &args[0].node else {
                    return Some(Ty::Unknown);
                };
                let init = self.check(&args[1]);
                self.scopes.push((var.clone(), init));
                let body = self.check(&args[2]);
                self.scopes.pop();
                Some(body)
            }
            (Some(range), "all" | "exists" | "exists_one" | "filter", 2)
            | (Some(range), "map", 2 | 3) => {
                let Node::Ident(var) = &args[0].node else {
                    return Some(Ty::Unknown);
                };
                let rt = self.check(range);
                let elem = match &rt {
                    Ty::List(e) => (**e).clone(),
                    Ty::Map(k, _) => (**k).clone(),
                    Ty::Unknown => Ty::Unknown,
                    t if t.is_wild() => Ty::Dyn,
                    t => {
                        self.report(
                            range.pos,
                            format!(
                                "expression of type '{}' cannot be range of a comprehension (must be list, map, or dynamic)",
                                format(t)
                            ),
                        );
                        Ty::Dyn
                    }
                };
                self.scopes.push((var.clone(), elem.clone()));
                let bodies: Vec<Ty> = args[1..].iter().map(|a| self.check(a)).collect();
                self.scopes.pop();
                Some(match func {
                    "map" => {
                        let out = bodies.last().cloned().unwrap_or(Ty::Dyn);
                        let out = if out == Ty::Error { Ty::Dyn } else { out };
                        Ty::list(out)
                    }
                    "filter" => Ty::list(elem),
                    _ if bodies[0].is_wild() || bodies[0] == Ty::Bool => Ty::Bool,
                    // The expansion's `&&` (all) or `||` (exists) takes the body.
                    "all" | "exists" if !bodies[0].has_unknown() => {
                        let msg =
                            format!("expected type 'bool' but found '{}'", format(&bodies[0]));
                        self.report(args[1].pos, msg);
                        Ty::Bool
                    }
                    // exists_one's body goes to a conditional whose message names the
                    // expansion's internals: not reported here.
                    _ => Ty::Unknown,
                })
            }
            // Two-variable comprehensions and the optional macros: unmodelled.
            (
                Some(_),
                "all" | "exists" | "existsOne" | "exists_one" | "transformList" | "transformMap"
                | "transformMapEntry" | "optMap" | "optFlatMap",
                _,
            ) => Some(Ty::Unknown),
            _ => None,
        }
    }
}

/// cel-go's display of the messages of one expression (`Issues.String()`): sorted by
/// position, each as `ERROR: <input>:line:col: msg` with the line and a caret under the
/// column.
pub fn display(text: &str, issues: &[Issue]) -> String {
    let mut issues = issues.to_vec();
    crate::sort::sort_by_key(&mut issues[..], |i| i.pos);
    let lines: Vec<&str> = text.split('\n').collect();
    let mut out = Vec::new();
    for i in &issues {
        // Line and column (in characters) of the offset.
        let (mut line, mut col, mut seen) = (0, i.pos, 0);
        for (n, l) in lines.iter().enumerate() {
            let len = l.chars().count() + 1;
            if i.pos < seen + len {
                line = n;
                col = i.pos - seen;
                break;
            }
            seen += len;
        }
        let mut s = format!("ERROR: <input>:{}:{}: {}", line + 1, col + 1, i.msg);
        let snippet = lines.get(line).copied().unwrap_or("").replace('\t', " ");
        if snippet.len() <= 16384 {
            s.push_str("\n | ");
            s.push_str(&snippet);
            s.push_str("\n | ");
            let chars: Vec<char> = snippet.chars().collect();
            for c in chars.iter().take(col) {
                s.push(if c.len_utf8() > 1 { '\u{ff0e}' } else { '.' });
            }
            let wide = chars.get(col).is_some_and(|c| c.len_utf8() > 1);
            s.push(if wide { '\u{ff3e}' } else { '^' });
        }
        out.push(s);
    }
    out.join("\n")
}
