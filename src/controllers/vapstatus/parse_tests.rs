use super::*;

fn pos_of(e: &Expr) -> usize {
    e.pos
}

#[test]
fn positions_are_cel_go_s() {
    // Select at its dot, member call at its '(', index at '[', operators at their token.
    let e = parse("object.spec.replicas > 'a'").unwrap();
    let Node::Call { func, args, .. } = &e.node else {
        panic!()
    };
    assert_eq!((func.as_str(), e.pos), ("_>_", 21));
    assert_eq!(pos_of(&args[0]), 11);
    let e = parse("object.metadata.name.startsWith(x)").unwrap();
    assert_eq!(e.pos, 31);
    let e = parse("a.b['x']").unwrap();
    assert_eq!(e.pos, 3);
    let e = parse("(a ? b : c) == d").unwrap();
    let Node::Call { args, .. } = &e.node else {
        panic!()
    };
    assert_eq!(args[0].pos, 3);
    let e = parse("size(x)").unwrap();
    assert_eq!(e.pos, 4);
    let e = parse("x in [1, 2]").unwrap();
    assert_eq!(e.pos, 2);
}

#[test]
fn precedence_and_literals() {
    let e = parse("a || b && c == 1 + 2 * 3").unwrap();
    let Node::Call { func, .. } = &e.node else {
        panic!()
    };
    assert_eq!(func, "_||_");
    for t in [
        "1u",
        "1.5",
        "1e3",
        "0x1F",
        "'s'",
        "\"s\"",
        "r'\\d'",
        "b'x'",
        "'''a'b'''",
        "-1",
        "!!true",
        "[1, 2,]",
        "{'a': 1}",
        "x.?y",
        "a[?0]",
        "cel.bind(x, 1, x + 1)",
        "// c\n true",
    ] {
        assert!(parse(t).is_ok(), "{t}");
    }
    for t in ["1 +", "(a", "a.", "if", "'x", "a b"] {
        assert!(parse(t).is_err(), "{t}");
    }
}
