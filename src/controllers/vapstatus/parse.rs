//! A parser for CEL expressions as the type checker needs them: the AST with, for every node,
//! the position cel-go's parser gives it (the operator's token for operators, the `.` of a
//! selection, the `(` of a call, the `[` of an index, the `?` of a conditional, the first token
//! of a literal or identifier), so that a warning points where upstream's does. Macros (`has`,
//! `all`, `exists`, `exists_one`, `map`, `filter`, `cel.bind`) stay calls here; the checker
//! reads them as cel-go's expansions would type.

/// One node: its position (characters from the start of the text) and what it is.
#[derive(Debug, Clone, PartialEq)]
pub struct Expr {
    pub pos: usize,
    pub node: Node,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Lit {
    Int,
    Uint,
    Double,
    Str(String),
    Bytes,
    Bool,
    Null,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    Lit(Lit),
    Ident(String),
    /// `operand.field`; `optional` for `operand.?field`.
    Select {
        operand: Box<Expr>,
        field: String,
        optional: bool,
    },
    /// A function or operator (`_+_`, `_[_]`, `!_`, `@in`, `_?_:_`, ...), with its receiver
    /// for a member call.
    Call {
        target: Option<Box<Expr>>,
        func: String,
        args: Vec<Expr>,
    },
    List(Vec<Expr>),
    Map(Vec<(Expr, Expr)>),
    /// `Name{field: value}`: message construction, which Kubernetes' environment has no
    /// types for.
    Struct,
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Int,
    Uint,
    Double,
    Str(String),
    Bytes,
    Ident(String),
    Punct(&'static str),
    End,
}

const PUNCT: [&str; 25] = [
    "&&", "||", "==", "!=", "<=", ">=", ".?", "[?", "<", ">", "+", "-", "*", "/", "%", "!", "?",
    ":", ".", ",", "(", ")", "[", "]", "{",
];

/// A parse failure: where, and why (not shown to users: the API server refuses expressions
/// that do not parse before they can be stored).
#[derive(Debug, Clone, PartialEq)]
pub struct ParseError {
    pub pos: usize,
    pub msg: String,
}

struct Lexer {
    chars: Vec<char>,
    i: usize,
}

impl Lexer {
    fn skip_space(&mut self) {
        loop {
            while self.i < self.chars.len() && self.chars[self.i].is_whitespace() {
                self.i += 1;
            }
            if self.chars.get(self.i) == Some(&'/') && self.chars.get(self.i + 1) == Some(&'/') {
                while self.i < self.chars.len() && self.chars[self.i] != '\n' {
                    self.i += 1;
                }
                continue;
            }
            return;
        }
    }

    fn next(&mut self) -> Result<(usize, Tok), ParseError> {
        self.skip_space();
        let start = self.i;
        let Some(&c) = self.chars.get(self.i) else {
            return Ok((start, Tok::End));
        };
        let err = |m: &str| ParseError {
            pos: start,
            msg: m.to_string(),
        };
        if c.is_ascii_digit() || (c == '.' && self.peek_digit(1)) {
            return Ok((start, self.number()));
        }
        if c.is_ascii_alphabetic() || c == '_' {
            let lower = c.to_ascii_lowercase();
            let q = self.chars.get(self.i + 1).copied();
            if (lower == 'r' || lower == 'b') && matches!(q, Some('\'') | Some('"')) {
                self.i += 1;
                let s = self
                    .string(lower == 'r')
                    .map_err(|_| err("unterminated string"))?;
                return Ok((
                    start,
                    if lower == 'b' {
                        Tok::Bytes
                    } else {
                        Tok::Str(s)
                    },
                ));
            }
            if (lower == 'r' || lower == 'b')
                && matches!(q, Some('r') | Some('R') | Some('b') | Some('B'))
            {
                if let Some('\'') | Some('"') = self.chars.get(self.i + 2) {
                    self.i += 2;
                    self.string(true).map_err(|_| err("unterminated string"))?;
                    return Ok((start, Tok::Bytes));
                }
            }
            let mut s = String::new();
            while let Some(&d) = self.chars.get(self.i) {
                if d.is_ascii_alphanumeric() || d == '_' {
                    s.push(d);
                    self.i += 1;
                } else {
                    break;
                }
            }
            return Ok((start, Tok::Ident(s)));
        }
        if c == '\'' || c == '"' {
            let s = self.string(false).map_err(|_| err("unterminated string"))?;
            return Ok((start, Tok::Str(s)));
        }
        for p in PUNCT.iter().chain(["}"].iter()) {
            let n = p.chars().count();
            if self.chars[self.i..].iter().take(n).copied().eq(p.chars()) {
                self.i += n;
                return Ok((start, Tok::Punct(p)));
            }
        }
        Err(err(&format!("token recognition error at: '{c}'")))
    }

    fn peek_digit(&self, k: usize) -> bool {
        self.chars.get(self.i + k).is_some_and(char::is_ascii_digit)
    }

    fn number(&mut self) -> Tok {
        let c = &self.chars;
        if c[self.i] == '0' && matches!(c.get(self.i + 1), Some('x') | Some('X')) {
            self.i += 2;
            while c.get(self.i).is_some_and(char::is_ascii_hexdigit) {
                self.i += 1;
            }
            return self.int_suffix();
        }
        let mut double = false;
        while c.get(self.i).is_some_and(char::is_ascii_digit) {
            self.i += 1;
        }
        if c.get(self.i) == Some(&'.') && self.peek_digit(1) {
            double = true;
            self.i += 1;
            while c.get(self.i).is_some_and(char::is_ascii_digit) {
                self.i += 1;
            }
        }
        if matches!(c.get(self.i), Some('e') | Some('E')) {
            let k = if matches!(c.get(self.i + 1), Some('+') | Some('-')) {
                2
            } else {
                1
            };
            if self.peek_digit(k) {
                double = true;
                self.i += k;
                while c.get(self.i).is_some_and(char::is_ascii_digit) {
                    self.i += 1;
                }
            }
        }
        if double {
            Tok::Double
        } else {
            self.int_suffix()
        }
    }

    fn int_suffix(&mut self) -> Tok {
        if matches!(self.chars.get(self.i), Some('u') | Some('U')) {
            self.i += 1;
            Tok::Uint
        } else {
            Tok::Int
        }
    }

    /// A quoted string from its opening quote; escapes kept simple (the value only matters
    /// as a map key or index).
    fn string(&mut self, raw: bool) -> Result<String, ()> {
        let q = self.chars[self.i];
        let triple =
            self.chars.get(self.i + 1) == Some(&q) && self.chars.get(self.i + 2) == Some(&q);
        self.i += if triple { 3 } else { 1 };
        let mut s = String::new();
        loop {
            let Some(&c) = self.chars.get(self.i) else {
                return Err(());
            };
            if c == q
                && (!triple
                    || (self.chars.get(self.i + 1) == Some(&q)
                        && self.chars.get(self.i + 2) == Some(&q)))
            {
                self.i += if triple { 3 } else { 1 };
                return Ok(s);
            }
            if c == '\n' && !triple {
                return Err(());
            }
            if c == '\\' && !raw {
                let e = self.chars.get(self.i + 1).copied().ok_or(())?;
                s.push(match e {
                    'n' => '\n',
                    't' => '\t',
                    'r' => '\r',
                    other => other,
                });
                self.i += 2;
                continue;
            }
            s.push(c);
            self.i += 1;
        }
    }
}

/// Parses one expression.
pub fn parse(text: &str) -> Result<Expr, ParseError> {
    let mut lx = Lexer {
        chars: text.chars().collect(),
        i: 0,
    };
    let mut toks = Vec::new();
    loop {
        let t = lx.next()?;
        let end = t.1 == Tok::End;
        toks.push(t);
        if end {
            break;
        }
    }
    let mut p = Parser {
        toks,
        i: 0,
        depth: 0,
    };
    let e = p.expr()?;
    match p.peek() {
        Tok::End => Ok(e),
        _ => Err(p.error("extraneous input")),
    }
}

struct Parser {
    toks: Vec<(usize, Tok)>,
    i: usize,
    depth: usize,
}

fn call(pos: usize, func: &str, args: Vec<Expr>) -> Expr {
    Expr {
        pos,
        node: Node::Call {
            target: None,
            func: func.to_string(),
            args,
        },
    }
}

impl Parser {
    fn peek(&self) -> &Tok {
        &self.toks[self.i].1
    }

    fn pos(&self) -> usize {
        self.toks[self.i].0
    }

    fn bump(&mut self) -> (usize, Tok) {
        let t = self.toks[self.i].clone();
        if t.1 != Tok::End {
            self.i += 1;
        }
        t
    }

    fn is(&self, p: &str) -> bool {
        matches!(self.peek(), Tok::Punct(q) if *q == p)
    }

    fn error(&self, msg: &str) -> ParseError {
        ParseError {
            pos: self.pos(),
            msg: msg.to_string(),
        }
    }

    fn expect(&mut self, p: &str) -> Result<usize, ParseError> {
        if self.is(p) {
            Ok(self.bump().0)
        } else {
            Err(self.error(&format!("expected '{p}'")))
        }
    }

    fn expr(&mut self) -> Result<Expr, ParseError> {
        self.depth += 1;
        if self.depth > 250 {
            return Err(self.error("expression recursion limit exceeded"));
        }
        let c = self.or()?;
        let e = if self.is("?") {
            let pos = self.bump().0;
            let a = self.or()?;
            self.expect(":")?;
            let b = self.expr()?;
            call(pos, "_?_:_", vec![c, a, b])
        } else {
            c
        };
        self.depth -= 1;
        Ok(e)
    }

    fn or(&mut self) -> Result<Expr, ParseError> {
        let mut e = self.and()?;
        while self.is("||") {
            let pos = self.bump().0;
            let r = self.and()?;
            e = call(pos, "_||_", vec![e, r]);
        }
        Ok(e)
    }

    fn and(&mut self) -> Result<Expr, ParseError> {
        let mut e = self.relation()?;
        while self.is("&&") {
            let pos = self.bump().0;
            let r = self.relation()?;
            e = call(pos, "_&&_", vec![e, r]);
        }
        Ok(e)
    }

    fn relation(&mut self) -> Result<Expr, ParseError> {
        let mut e = self.calc(0)?;
        loop {
            let func = match self.peek() {
                Tok::Punct("<") => "_<_",
                Tok::Punct("<=") => "_<=_",
                Tok::Punct(">") => "_>_",
                Tok::Punct(">=") => "_>=_",
                Tok::Punct("==") => "_==_",
                Tok::Punct("!=") => "_!=_",
                Tok::Ident(s) if s == "in" => "@in",
                _ => return Ok(e),
            };
            let pos = self.bump().0;
            let r = self.calc(0)?;
            e = call(pos, func, vec![e, r]);
        }
    }

    /// Level 0: `+ -`; level 1: `* / %`.
    fn calc(&mut self, level: u8) -> Result<Expr, ParseError> {
        let mut e = if level == 0 {
            self.calc(1)?
        } else {
            self.unary()?
        };
        loop {
            let func = match (level, self.peek()) {
                (0, Tok::Punct("+")) => "_+_",
                (0, Tok::Punct("-")) => "_-_",
                (1, Tok::Punct("*")) => "_*_",
                (1, Tok::Punct("/")) => "_/_",
                (1, Tok::Punct("%")) => "_%_",
                _ => return Ok(e),
            };
            let pos = self.bump().0;
            let r = if level == 0 {
                self.calc(1)?
            } else {
                self.unary()?
            };
            e = call(pos, func, vec![e, r]);
        }
    }

    fn unary(&mut self) -> Result<Expr, ParseError> {
        for (op, func) in [("!", "!_"), ("-", "-_")] {
            if self.is(op) {
                let pos = self.pos();
                let mut n = 0;
                while self.is(op) {
                    self.bump();
                    n += 1;
                }
                if op == "-" && n == 1 && matches!(self.peek(), Tok::Int | Tok::Double) {
                    // A negative literal, as cel-go's grammar reads `-1`.
                    let lit = if *self.peek() == Tok::Int {
                        Lit::Int
                    } else {
                        Lit::Double
                    };
                    self.bump();
                    let e = Expr {
                        pos,
                        node: Node::Lit(lit),
                    };
                    return self.member_tail(e);
                }
                let m = self.member()?;
                return Ok(if n % 2 == 1 {
                    call(pos, func, vec![m])
                } else {
                    m
                });
            }
        }
        self.member()
    }

    fn member(&mut self) -> Result<Expr, ParseError> {
        let e = self.primary()?;
        self.member_tail(e)
    }

    fn member_tail(&mut self, mut e: Expr) -> Result<Expr, ParseError> {
        loop {
            if self.is(".") || self.is(".?") {
                let optional = self.is(".?");
                let pos = self.bump().0;
                let field = match self.bump().1 {
                    Tok::Ident(s) => s,
                    _ => return Err(self.error("expected a field name")),
                };
                if !optional && self.is("(") {
                    let open = self.bump().0;
                    let args = self.args(")")?;
                    e = Expr {
                        pos: open,
                        node: Node::Call {
                            target: Some(Box::new(e)),
                            func: field,
                            args,
                        },
                    };
                } else {
                    e = Expr {
                        pos,
                        node: Node::Select {
                            operand: Box::new(e),
                            field,
                            optional,
                        },
                    };
                }
            } else if self.is("[") || self.is("[?") {
                let optional = self.is("[?");
                let pos = self.bump().0;
                let i = self.expr()?;
                self.expect("]")?;
                let func = if optional { "_[?_]" } else { "_[_]" };
                e = call(pos, func, vec![e, i]);
            } else {
                return Ok(e);
            }
        }
    }

    /// Comma-separated expressions up to `close` (a trailing comma allowed).
    fn args(&mut self, close: &str) -> Result<Vec<Expr>, ParseError> {
        let mut out = Vec::new();
        while !self.is(close) {
            out.push(self.expr()?);
            if !self.is(",") {
                break;
            }
            self.bump();
        }
        self.expect(close)?;
        Ok(out)
    }

    fn primary(&mut self) -> Result<Expr, ParseError> {
        let (pos, tok) = self.bump();
        let lit = |l| {
            Ok(Expr {
                pos,
                node: Node::Lit(l),
            })
        };
        match tok {
            Tok::Int => lit(Lit::Int),
            Tok::Uint => lit(Lit::Uint),
            Tok::Double => lit(Lit::Double),
            Tok::Str(s) => lit(Lit::Str(s)),
            Tok::Bytes => lit(Lit::Bytes),
            Tok::Ident(s) if s == "true" || s == "false" => lit(Lit::Bool),
            Tok::Ident(s) if s == "null" => lit(Lit::Null),
            Tok::Ident(s) if super::types::is_reserved(&s) => Err(ParseError {
                pos,
                msg: format!("reserved identifier: {s}"),
            }),
            Tok::Ident(s) => self.ident(pos, s),
            Tok::Punct(".") => match self.bump() {
                (p, Tok::Ident(s)) => self.ident(p, s),
                _ => Err(self.error("expected an identifier")),
            },
            Tok::Punct("(") => {
                let e = self.expr()?;
                self.expect(")")?;
                Ok(e)
            }
            Tok::Punct("[") => Ok(Expr {
                pos,
                node: Node::List(self.args("]")?),
            }),
            Tok::Punct("{") => {
                let mut entries = Vec::new();
                while !self.is("}") {
                    if self.is("?") {
                        self.bump();
                    }
                    let k = self.expr()?;
                    self.expect(":")?;
                    let v = self.expr()?;
                    entries.push((k, v));
                    if !self.is(",") {
                        break;
                    }
                    self.bump();
                }
                self.expect("}")?;
                Ok(Expr {
                    pos,
                    node: Node::Map(entries),
                })
            }
            _ => Err(ParseError {
                pos,
                msg: "mismatched input".to_string(),
            }),
        }
    }

    fn ident(&mut self, pos: usize, name: String) -> Result<Expr, ParseError> {
        if self.is("(") {
            let open = self.bump().0;
            let args = self.args(")")?;
            return Ok(call(open, &name, args));
        }
        if self.is("{") {
            // Message construction: skipped to its closing brace.
            self.bump();
            let mut depth = 1;
            while depth > 0 {
                match self.bump().1 {
                    Tok::Punct("{") => depth += 1,
                    Tok::Punct("}") => depth -= 1,
                    Tok::End => return Err(self.error("unterminated message")),
                    _ => {}
                }
            }
            return Ok(Expr {
                pos,
                node: Node::Struct,
            });
        }
        Ok(Expr {
            pos,
            node: Node::Ident(name),
        })
    }
}

#[cfg(test)]
#[path = "parse_tests.rs"]
mod tests;
