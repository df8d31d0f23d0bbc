//! A step's `when` condition: a small boolean expression language over the template context.
//!
//! The whole expression is parsed before anything is evaluated, so a typo is reported even
//! where short-circuiting would skip it. Paths are resolved with [`template::lookup`], so a
//! missing or truncated path fails exactly as it does in a template.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::iter::Peekable;
use std::vec;

use serde_json::{Number, Value};

use super::template::{self, ROOTS, TemplateError};

/// Longest accepted expression, in characters; matches the CRD's `maxLength`.
pub const MAX_LEN: usize = 1000;

/// Deepest nesting of parentheses and `!`.
pub const MAX_DEPTH: usize = 64;

/// Most work one evaluation may do: every value a comparison walks costs one, a
/// string 1 per 64 bytes on top. A thousand characters can compare a 1 MiB object
/// with itself dozens of times (tens of milliseconds); an event's fan-out evaluates up
/// to a thousand filters, so each is held to about a millisecond.
pub const MAX_COST: u64 = 100_000;

/// Every operator, tightest-binding first, with a one-line description: what the
/// workflow reference lists (`crate::reference`).
pub const OPERATORS: [(&str, &str); 10] = [
    ("( )", "Grouping."),
    ("!", "Not: true when the operand is falsy."),
    (
        "==",
        "Equal. Numbers compare by value (`3 == 3.0`), other values by type and content; \
         values of different types are never equal.",
    ),
    ("!=", "Not equal."),
    (
        "<",
        "Less than. Both sides numbers, or both strings (compared character by character); \
         any other pair is an error.",
    ),
    ("<=", "Less than or equal; as `<`."),
    (">", "Greater than; as `<`."),
    (">=", "Greater than or equal; as `<`."),
    (
        "&&",
        "And: true when both sides are truthy; the right side is not evaluated when the \
         left is falsy.",
    ),
    (
        "||",
        "Or: true when either side is truthy; the right side is not evaluated when the \
         left is truthy.",
    ),
];

/// Positions count characters from the start of the expression, starting at 0.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExprError {
    #[error("syntax error at position {position}: {message}")]
    Syntax { message: String, position: usize },
    #[error("path \"{path}\" not found")]
    MissingPath { path: String },
    #[error(
        "cannot read \"{path}\": the output of step \"{step}\" was truncated (too large to keep)"
    )]
    TruncatedOutput { step: String, path: String },
    #[error("cannot compare {left} with {right} using '{op}' at position {position}")]
    TypeMismatch {
        op: &'static str,
        left: &'static str,
        right: &'static str,
        position: usize,
    },
    #[error("expression is {len} characters long; the limit is {limit}")]
    TooLong { len: usize, limit: usize },
    #[error("expression nests deeper than {limit} levels at position {position}")]
    TooDeep { limit: usize, position: usize },
    #[error(
        "expression compares too much data: evaluating it takes more than {limit} steps \
         (at position {position})"
    )]
    TooCostly { limit: u64, position: usize },
}

/// Evaluates a `when` expression to a boolean, using truthiness for a bare value.
pub fn evaluate(expr: &str, ctx: &Value) -> Result<bool, ExprError> {
    evaluate_over(expr, ctx, &ROOTS)
}

/// [`evaluate`] for an expression whose paths start with one of `roots` instead of the
/// step context's (an event trigger's `filter` reads `event.*`).
pub fn evaluate_over(expr: &str, ctx: &Value, roots: &[&str]) -> Result<bool, ExprError> {
    let mut budget = MAX_COST;
    Ok(truthy(
        eval(&parse(expr, roots)?, ctx, &mut budget)?.as_ref(),
    ))
}

/// Parses `expr` as [`evaluate`] does, without evaluating it: an error here fails every
/// evaluation, whatever the context holds (how a workflow's `when` is checked before any
/// run, `engine::spec_check`). What remains for evaluation is data: missing or truncated
/// paths and comparisons of mismatched types.
pub fn check(expr: &str) -> Result<(), ExprError> {
    check_over(expr, &ROOTS)
}

/// [`check`] for an expression over `roots` (see [`evaluate_over`]).
pub fn check_over(expr: &str, roots: &[&str]) -> Result<(), ExprError> {
    parse(expr, roots).map(drop)
}

fn parse(expr: &str, roots: &[&str]) -> Result<Node, ExprError> {
    let len = expr.chars().count();
    if len > MAX_LEN {
        return Err(ExprError::TooLong {
            len,
            limit: MAX_LEN,
        });
    }
    let chars: Vec<char> = expr.chars().collect();
    let mut parser = Parser {
        tokens: tokenize(&chars, roots)?.into_iter().peekable(),
        end: chars.len(),
        depth: 0,
    };
    let node = parser.or()?;
    if let Some(token) = parser.tokens.next() {
        return Err(syntax(
            format!("unexpected {}", token.kind.describe()),
            token.position,
        ));
    }
    Ok(node)
}

/// The paths `expr` refers to, without evaluating it: how the engine learns which Secrets
/// a condition reads before it reads them. Empty when the expression is too long or does
/// not tokenize; evaluating it reports why.
pub fn paths(expr: &str) -> Vec<String> {
    if expr.chars().count() > MAX_LEN {
        return Vec::new();
    }
    let chars: Vec<char> = expr.chars().collect();
    tokenize(&chars, &ROOTS)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|token| match token.kind {
            Kind::Path(path) => Some(path),
            _ => None,
        })
        .collect()
}

fn syntax(message: impl Into<String>, position: usize) -> ExprError {
    ExprError::Syntax {
        message: message.into(),
        position,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl CmpOp {
    fn as_str(self) -> &'static str {
        match self {
            CmpOp::Eq => "==",
            CmpOp::Ne => "!=",
            CmpOp::Lt => "<",
            CmpOp::Le => "<=",
            CmpOp::Gt => ">",
            CmpOp::Ge => ">=",
        }
    }
}

#[derive(Debug, PartialEq)]
enum Kind {
    LParen,
    RParen,
    Not,
    And,
    Or,
    Cmp(CmpOp),
    Literal(Value),
    Path(String),
}

impl Kind {
    fn describe(&self) -> String {
        match self {
            Kind::LParen => "'('".into(),
            Kind::RParen => "')'".into(),
            Kind::Not => "'!'".into(),
            Kind::And => "'&&'".into(),
            Kind::Or => "'||'".into(),
            Kind::Cmp(op) => format!("'{}'", op.as_str()),
            Kind::Literal(value) => format!("value {value}"),
            Kind::Path(path) => format!("path {path}"),
        }
    }
}

struct Token {
    kind: Kind,
    position: usize,
}

fn tokenize(chars: &[char], roots: &[&str]) -> Result<Vec<Token>, ExprError> {
    let mut tokens = Vec::new();
    let mut i = 0;
    while let Some(&c) = chars.get(i) {
        let position = i;
        let next = chars.get(i + 1).copied();
        let (kind, len) = match (c, next) {
            (c, _) if c.is_whitespace() => {
                i += 1;
                continue;
            }
            ('(', _) => (Kind::LParen, 1),
            (')', _) => (Kind::RParen, 1),
            ('&', Some('&')) => (Kind::And, 2),
            ('|', Some('|')) => (Kind::Or, 2),
            ('=', Some('=')) => (Kind::Cmp(CmpOp::Eq), 2),
            ('!', Some('=')) => (Kind::Cmp(CmpOp::Ne), 2),
            ('<', Some('=')) => (Kind::Cmp(CmpOp::Le), 2),
            ('>', Some('=')) => (Kind::Cmp(CmpOp::Ge), 2),
            ('!', _) => (Kind::Not, 1),
            ('<', _) => (Kind::Cmp(CmpOp::Lt), 1),
            ('>', _) => (Kind::Cmp(CmpOp::Gt), 1),
            ('=', _) => return Err(syntax("expected '==' to compare", position)),
            ('&', _) => return Err(syntax("expected '&&'", position)),
            ('|', _) => return Err(syntax("expected '||'", position)),
            ('\'' | '"', _) => {
                let (text, len) = string(&chars[i..], position)?;
                (Kind::Literal(Value::String(text)), len)
            }
            ('{', Some('{')) => {
                let (path, len) = braced_path(&chars[i..], position, roots)?;
                (Kind::Path(path), len)
            }
            ('-', _) | ('0'..='9', _) => {
                let (number, len) = number(&chars[i..], position)?;
                (Kind::Literal(Value::Number(number)), len)
            }
            (c, _) if is_word_start(c) => {
                let len = word_len(&chars[i..]);
                (word(&chars[i..i + len], position, roots)?, len)
            }
            (c, _) => return Err(syntax(format!("unexpected character '{c}'"), position)),
        };
        tokens.push(Token { kind, position });
        i += len;
    }
    Ok(tokens)
}

fn is_word_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_'
}

fn word_len(chars: &[char]) -> usize {
    chars
        .iter()
        .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        .count()
}

fn word(chars: &[char], position: usize, roots: &[&str]) -> Result<Kind, ExprError> {
    let text: String = chars.iter().collect();
    Ok(match text.as_str() {
        "true" => Kind::Literal(Value::Bool(true)),
        "false" => Kind::Literal(Value::Bool(false)),
        "null" => Kind::Literal(Value::Null),
        _ => Kind::Path(checked_path(text, position, roots)?),
    })
}

/// Checks path syntax and root up front, so that evaluation only fails on absent data.
fn checked_path(path: String, position: usize, roots: &[&str]) -> Result<String, ExprError> {
    if path.split('.').any(str::is_empty) {
        return Err(syntax(format!("invalid path '{path}'"), position));
    }
    if !path
        .split('.')
        .next()
        .is_some_and(|root| roots.contains(&root))
    {
        let listed = match roots {
            [] => String::new(),
            [one] => (*one).to_string(),
            [rest @ .., last] => format!("{} or {last}", rest.join(", ")),
        };
        let message = format!("unknown name '{path}' (paths start with {listed}; quote strings)");
        return Err(syntax(message, position));
    }
    Ok(path)
}

/// A quoted string starting at `chars[0]`; only the quote and backslash may be escaped.
fn string(chars: &[char], position: usize) -> Result<(String, usize), ExprError> {
    let quote = chars.first().copied();
    let mut text = String::new();
    let mut i = 1;
    loop {
        match chars.get(i).copied() {
            None => return Err(syntax("unterminated string", position)),
            Some('\\') => match chars.get(i + 1).copied() {
                Some(c) if c == '\\' || Some(c) == quote => {
                    text.push(c);
                    i += 2;
                }
                _ => {
                    let message = "invalid escape: only the quote and '\\' can follow '\\'";
                    return Err(syntax(message, position + i));
                }
            },
            Some(c) if Some(c) == quote => return Ok((text, i + 1)),
            Some(c) => {
                text.push(c);
                i += 1;
            }
        }
    }
}

/// `{{ path }}`, accepted so a condition can be written like a template.
fn braced_path(
    chars: &[char],
    position: usize,
    roots: &[&str],
) -> Result<(String, usize), ExprError> {
    let skip_space = |from: usize| {
        from + chars[from.min(chars.len())..]
            .iter()
            .take_while(|c| c.is_whitespace())
            .count()
    };
    let start = skip_space(2);
    let len = chars
        .get(start)
        .filter(|&&c| is_word_start(c))
        .map_or(0, |_| word_len(&chars[start..]));
    if len == 0 {
        return Err(syntax("expected a path inside '{{ }}'", position + start));
    }
    let path = checked_path(
        chars[start..start + len].iter().collect(),
        position + start,
        roots,
    )?;
    let end = skip_space(start + len);
    if chars.get(end..end + 2) != Some(&['}', '}'][..]) {
        return Err(syntax("expected '}}' to close '{{'", position + end));
    }
    Ok((path, end + 2))
}

/// `-?digits(.digits)?` starting at `chars[0]`.
fn number(chars: &[char], position: usize) -> Result<(Number, usize), ExprError> {
    let digits = |from: usize| {
        chars
            .iter()
            .skip(from)
            .take_while(|c| c.is_ascii_digit())
            .count()
    };
    let sign = usize::from(chars.first() == Some(&'-'));
    let whole = digits(sign);
    let mut len = sign + whole;
    if chars.get(len) == Some(&'.') {
        let fraction = digits(len + 1);
        len += 1 + fraction;
        if fraction == 0 {
            return Err(syntax("expected digits after '.'", position + len));
        }
    }
    let trailing = chars
        .get(len)
        .is_some_and(|&c| c.is_alphanumeric() || matches!(c, '.' | '_'));
    if whole == 0 || trailing {
        return Err(syntax("invalid number", position));
    }
    let text: String = chars[..len].iter().collect();
    let number = text
        .parse::<i64>()
        .map(Number::from)
        .or_else(|_| text.parse::<u64>().map(Number::from))
        .ok()
        .or_else(|| text.parse::<f64>().ok().and_then(Number::from_f64))
        .ok_or_else(|| syntax("number out of range", position))?;
    Ok((number, len))
}

enum Node {
    Literal(Value),
    Path {
        path: String,
        position: usize,
    },
    Not(Box<Node>),
    Compare {
        op: CmpOp,
        left: Box<Node>,
        right: Box<Node>,
        position: usize,
    },
    And(Vec<Node>),
    Or(Vec<Node>),
}

/// Recursive descent, loosest first: `||`, then `&&`, then one comparison, then `!`.
struct Parser {
    tokens: Peekable<vec::IntoIter<Token>>,
    end: usize,
    depth: usize,
}

impl Parser {
    fn eat(&mut self, kind: &Kind) -> bool {
        self.tokens.next_if(|t| &t.kind == kind).is_some()
    }

    fn or(&mut self) -> Result<Node, ExprError> {
        let mut items = vec![self.and()?];
        while self.eat(&Kind::Or) {
            items.push(self.and()?);
        }
        Ok(flatten(items, Node::Or))
    }

    fn and(&mut self) -> Result<Node, ExprError> {
        let mut items = vec![self.comparison()?];
        while self.eat(&Kind::And) {
            items.push(self.comparison()?);
        }
        Ok(flatten(items, Node::And))
    }

    fn comparison(&mut self) -> Result<Node, ExprError> {
        let left = self.unary()?;
        let Some(Token {
            kind: Kind::Cmp(op),
            position,
        }) = self.tokens.next_if(|t| matches!(t.kind, Kind::Cmp(_)))
        else {
            return Ok(left);
        };
        let right = self.unary()?;
        if let Some(next) = self
            .tokens
            .peek()
            .filter(|t| matches!(t.kind, Kind::Cmp(_)))
        {
            let message = "comparisons cannot be chained; combine them with '&&'";
            return Err(syntax(message, next.position));
        }
        Ok(Node::Compare {
            op,
            left: Box::new(left),
            right: Box::new(right),
            position,
        })
    }

    fn unary(&mut self) -> Result<Node, ExprError> {
        let Some(token) = self.tokens.next() else {
            return Err(syntax("expected a value, found the end", self.end));
        };
        match token.kind {
            Kind::Not => {
                let inner = self.nested(token.position, Self::unary)?;
                Ok(Node::Not(Box::new(inner)))
            }
            Kind::LParen => {
                let inner = self.nested(token.position, Self::or)?;
                if !self.eat(&Kind::RParen) {
                    let position = self.tokens.peek().map_or(self.end, |t| t.position);
                    return Err(syntax("expected ')'", position));
                }
                Ok(inner)
            }
            Kind::Literal(value) => Ok(Node::Literal(value)),
            Kind::Path(path) => Ok(Node::Path {
                path,
                position: token.position,
            }),
            other => Err(syntax(
                format!("expected a value, found {}", other.describe()),
                token.position,
            )),
        }
    }

    fn nested(
        &mut self,
        position: usize,
        parse: fn(&mut Self) -> Result<Node, ExprError>,
    ) -> Result<Node, ExprError> {
        if self.depth >= MAX_DEPTH {
            return Err(ExprError::TooDeep {
                limit: MAX_DEPTH,
                position,
            });
        }
        self.depth += 1;
        let node = parse(self);
        self.depth -= 1;
        node
    }
}

fn flatten(mut items: Vec<Node>, join: fn(Vec<Node>) -> Node) -> Node {
    if items.len() == 1
        && let Some(only) = items.pop()
    {
        return only;
    }
    join(items)
}

fn eval<'a>(node: &'a Node, ctx: &'a Value, budget: &mut u64) -> Result<Cow<'a, Value>, ExprError> {
    let boolean = |b: bool| Cow::Owned(Value::Bool(b));
    Ok(match node {
        Node::Literal(value) => Cow::Borrowed(value),
        Node::Path { path, position } => {
            Cow::Borrowed(template::resolve(ctx, path).map_err(|e| path_error(e, *position))?)
        }
        Node::Not(inner) => boolean(!truthy(eval(inner, ctx, budget)?.as_ref())),
        Node::And(items) => {
            for item in items {
                if !truthy(eval(item, ctx, budget)?.as_ref()) {
                    return Ok(boolean(false));
                }
            }
            boolean(true)
        }
        Node::Or(items) => {
            for item in items {
                if truthy(eval(item, ctx, budget)?.as_ref()) {
                    return Ok(boolean(true));
                }
            }
            boolean(false)
        }
        Node::Compare {
            op,
            left,
            right,
            position,
        } => {
            let (left, right) = (eval(left, ctx, budget)?, eval(right, ctx, budget)?);
            charge(budget, left.as_ref(), right.as_ref(), *position)?;
            boolean(compare(*op, left.as_ref(), right.as_ref(), *position)?)
        }
    })
}

/// Takes what comparing `left` with `right` costs from `budget`: the walk of the
/// smaller one (equality stops where it ends), counted only as far as the budget goes.
fn charge(budget: &mut u64, left: &Value, right: &Value, position: usize) -> Result<(), ExprError> {
    let cost = cost_upto(left, *budget).min(cost_upto(right, *budget));
    if cost > *budget {
        return Err(ExprError::TooCostly {
            limit: MAX_COST,
            position,
        });
    }
    *budget -= cost;
    Ok(())
}

/// What walking `value` costs, or more than `cap` once it exceeds it.
fn cost_upto(value: &Value, cap: u64) -> u64 {
    let mut cost = 0u64;
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        cost += 1;
        match v {
            Value::String(s) => cost += s.len() as u64 / 64,
            Value::Array(items) => stack.extend(items),
            Value::Object(map) => {
                for (key, item) in map {
                    cost += key.len() as u64 / 64;
                    stack.push(item);
                }
            }
            _ => {}
        }
        if cost > cap {
            return cap + 1;
        }
    }
    cost
}

fn path_error(error: TemplateError, position: usize) -> ExprError {
    match error {
        TemplateError::MissingPath { path } => ExprError::MissingPath { path },
        TemplateError::TruncatedOutput { step, path } => ExprError::TruncatedOutput { step, path },
        // Paths were validated while parsing; keep anything else visible rather than panic.
        other => syntax(other.to_string(), position),
    }
}

fn compare(op: CmpOp, left: &Value, right: &Value, position: usize) -> Result<bool, ExprError> {
    let ordering = match (left, right) {
        (Value::Number(a), Value::Number(b)) => Some(compare_numbers(a, b)),
        (Value::String(a), Value::String(b)) => Some(a.cmp(b)),
        _ => None,
    };
    let equal = ordering.map_or_else(|| left == right, Ordering::is_eq);
    let ordered = || {
        ordering.ok_or(ExprError::TypeMismatch {
            op: op.as_str(),
            left: type_name(left),
            right: type_name(right),
            position,
        })
    };
    Ok(match op {
        CmpOp::Eq => equal,
        CmpOp::Ne => !equal,
        CmpOp::Lt => ordered()?.is_lt(),
        CmpOp::Le => ordered()?.is_le(),
        CmpOp::Gt => ordered()?.is_gt(),
        CmpOp::Ge => ordered()?.is_ge(),
    })
}

/// Integers compare exactly (an `f64` cannot tell 2^53 from 2^53 + 1); anything else as `f64`.
fn compare_numbers(a: &Number, b: &Number) -> Ordering {
    let integer = |n: &Number| {
        n.as_i64()
            .map(i128::from)
            .or_else(|| n.as_u64().map(i128::from))
    };
    match (integer(a), integer(b)) {
        (Some(x), Some(y)) => x.cmp(&y),
        // JSON numbers are never NaN, so `partial_cmp` always answers.
        _ => a
            .as_f64()
            .partial_cmp(&b.as_f64())
            .unwrap_or(Ordering::Equal),
    }
}

fn truthy(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|x| x != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(items) => !items.is_empty(),
        Value::Object(map) => !map.is_empty(),
    }
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ctx() -> Value {
        json!({
            "trigger": {"payload": {
                "kind": "push", "count": 3, "ratio": 0.5, "big": 9007199254740993u64,
                "on": true, "none": null, "empty": "", "items": ["a", "b"], "obj": {}
            }},
            "steps": {
                "check-a": {"output": {"status": 200, "ok": true}},
                "fetch": {"output": {"id": 1}, "output_truncated": true}
            },
            "run": {"id": "r1"},
            "workflow": {"id": "w1"},
            "secrets": {"s": {"k": "v"}}
        })
    }

    fn eval_ok(expr: &str) -> bool {
        evaluate(expr, &ctx()).unwrap_or_else(|e| panic!("{expr}: {e}"))
    }

    fn eval_err(expr: &str) -> ExprError {
        evaluate(expr, &ctx()).expect_err(expr)
    }

    fn syntax_at(expr: &str) -> (usize, String) {
        match eval_err(expr) {
            ExprError::Syntax { message, position } => (position, message),
            other => panic!("{expr}: expected a syntax error, got {other:?}"),
        }
    }

    #[test]
    fn paths_lists_every_path_including_braced_and_short_circuited_ones() {
        assert_eq!(
            paths("run.id == 'x' || {{ secrets.hook-token.value }} == 'y' && !secrets.b.c"),
            vec!["run.id", "secrets.hook-token.value", "secrets.b.c"]
        );
        // The string literal is not a path; literals and operators are skipped.
        assert_eq!(paths("'secrets.a.b' == true"), Vec::<String>::new());
        // Unparsable or too long: nothing (evaluation reports the error).
        assert!(paths("secrets.a.b = 1").is_empty());
        assert!(paths(&format!("secrets.a.b || {}", "true || ".repeat(200))).is_empty());
    }

    #[test]
    fn equality_and_inequality() {
        for (expr, expected) in [
            ("trigger.payload.kind == 'push'", true),
            ("trigger.payload.kind == \"pull\"", false),
            ("trigger.payload.kind != 'pull'", true),
            ("trigger.payload.count == 3", true),
            ("trigger.payload.count == 3.0", true),
            ("trigger.payload.count != 3", false),
            ("trigger.payload.on == true", true),
            ("trigger.payload.none == null", true),
            ("trigger.payload.items == trigger.payload.items", true),
            // Different types are never equal, but comparing them is not an error.
            ("trigger.payload.count == '3'", false),
            ("trigger.payload.none != false", true),
        ] {
            assert_eq!(eval_ok(expr), expected, "{expr}");
        }
    }

    #[test]
    fn ordering_of_numbers() {
        for (expr, expected) in [
            ("trigger.payload.count < 4", true),
            ("trigger.payload.count < 3", false),
            ("trigger.payload.count <= 3", true),
            ("trigger.payload.count > 2.5", true),
            ("trigger.payload.count >= 3", true),
            ("trigger.payload.count >= 3.01", false),
            ("trigger.payload.ratio > -1", true),
            ("-1.5 < -1", true),
            ("trigger.payload.big > 9007199254740992", true),
            ("18446744073709551615 > 9223372036854775807", true),
        ] {
            assert_eq!(eval_ok(expr), expected, "{expr}");
        }
    }

    #[test]
    fn ordering_of_strings_is_lexicographic() {
        assert!(eval_ok("'abc' < 'abd'"));
        assert!(eval_ok("'B' < 'a'"));
        assert!(eval_ok("trigger.payload.kind >= 'push'"));
        assert!(!eval_ok("'10' > '9'"));
    }

    #[test]
    fn ordering_mismatched_types_is_an_error() {
        let e = eval_err("trigger.payload.count < 'x'");
        assert_eq!(
            e,
            ExprError::TypeMismatch {
                op: "<",
                left: "number",
                right: "string",
                position: 22
            }
        );
        assert_eq!(
            e.to_string(),
            "cannot compare number with string using '<' at position 22"
        );
        assert!(matches!(
            eval_err("null >= 0"),
            ExprError::TypeMismatch { op: ">=", .. }
        ));
        assert!(matches!(
            eval_err("true > false"),
            ExprError::TypeMismatch { .. }
        ));
    }

    #[test]
    fn logical_operators() {
        for (expr, expected) in [
            ("true && true", true),
            ("true && false", false),
            ("false || true", true),
            ("false || false", false),
            ("!false", true),
            ("!true", false),
            ("!!trigger.payload.kind", true),
            ("!(trigger.payload.count == 3)", false),
            (
                "trigger.payload.on && steps.check-a.output.status == 200",
                true,
            ),
        ] {
            assert_eq!(eval_ok(expr), expected, "{expr}");
        }
    }

    #[test]
    fn and_binds_tighter_than_or() {
        assert!(eval_ok("true || false && false"));
        assert!(eval_ok("false && false || true"));
        assert!(!eval_ok("(true || false) && false"));
        // `!` binds tighter than comparison and `&&`.
        assert!(!eval_ok("!true == true"));
        assert!(!eval_ok("!false && false"));
    }

    #[test]
    fn short_circuit_skips_missing_paths() {
        assert!(!eval_ok("false && steps.nope.output.x == 1"));
        assert!(eval_ok("true || steps.nope.output.x"));
        assert!(eval_ok("false && trigger.payload.count < 'x' || true"));
        assert_eq!(
            eval_err("true && steps.nope.output.x"),
            ExprError::MissingPath {
                path: "steps.nope.output.x".into()
            }
        );
    }

    #[test]
    fn missing_and_truncated_paths() {
        let e = eval_err("trigger.payload.missing == 1");
        assert_eq!(e.to_string(), "path \"trigger.payload.missing\" not found");
        assert_eq!(
            eval_err("steps.fetch.output.id == 1"),
            ExprError::TruncatedOutput {
                step: "fetch".into(),
                path: "steps.fetch.output.id".into()
            }
        );
        assert!(
            eval_err("steps.fetch.output")
                .to_string()
                .contains("was truncated")
        );
    }

    #[test]
    fn unknown_names_are_syntax_errors_even_when_skipped() {
        let (position, message) = syntax_at("false && bogus.x == 1");
        assert_eq!(position, 9);
        assert!(message.contains("'bogus.x'"), "{message}");
        assert_eq!(syntax_at("trigger.payload.kind == push").0, 24);
        assert_eq!(syntax_at("trigger..payload").0, 0);
        assert_eq!(syntax_at("run.id.").0, 0);
    }

    #[test]
    fn templates_around_paths_are_accepted() {
        assert!(eval_ok("{{ trigger.payload.kind }} == 'push'"));
        assert!(eval_ok("{{steps.check-a.output.ok}}"));
        assert_eq!(
            syntax_at("{{ 'push' }} == 'push'"),
            (3, "expected a path inside '{{ }}'".into())
        );
        assert_eq!(syntax_at("{{ run.id == 'r1'").0, 10);
        assert_eq!(syntax_at("{{ run.id }").0, 10);
        assert_eq!(syntax_at("{{ nope }}").0, 3);
    }

    #[test]
    fn literals_and_escapes() {
        assert!(eval_ok(r#"'it\'s' == "it's""#));
        assert!(eval_ok(r#""say \"hi\"" == 'say "hi"'"#));
        assert!(eval_ok(r#"'a\\b' == "a\\b""#));
        assert_eq!(evaluate(r"'a\\b' == 'a'", &json!({})), Ok(false));
        assert!(eval_ok("0.25 < 1"));
        assert!(eval_ok("-0 == 0"));
        assert_eq!(
            syntax_at(r"'a\nb'"),
            (
                2,
                "invalid escape: only the quote and '\\' can follow '\\'".into()
            )
        );
    }

    #[test]
    fn truthiness_of_bare_values() {
        for (expr, expected) in [
            ("false", false),
            ("null", false),
            ("0", false),
            ("0.0", false),
            ("''", false),
            ("trigger.payload.empty", false),
            ("trigger.payload.obj", false),
            ("trigger.payload.none", false),
            ("true", true),
            ("-1", true),
            ("'x'", true),
            ("trigger.payload.items", true),
            ("trigger.payload.items.1", true),
            ("trigger.payload", true),
        ] {
            assert_eq!(eval_ok(expr), expected, "{expr}");
        }
    }

    #[test]
    fn syntax_errors_report_positions() {
        for (expr, position, message) in [
            ("", 0, "expected a value, found the end"),
            ("run.id ==", 9, "expected a value, found the end"),
            ("== 1", 0, "expected a value, found '=='"),
            ("run.id = 'r1'", 7, "expected '==' to compare"),
            ("true & false", 5, "expected '&&'"),
            ("true | false", 5, "expected '||'"),
            ("(true", 5, "expected ')'"),
            ("(true false)", 6, "expected ')'"),
            ("true)", 4, "unexpected ')'"),
            ("run.id 'x'", 7, "unexpected value \"x\""),
            (
                "1 < 2 < 3",
                6,
                "comparisons cannot be chained; combine them with '&&'",
            ),
            ("'abc", 0, "unterminated string"),
            ("1 == #", 5, "unexpected character '#'"),
            ("-x", 0, "invalid number"),
            ("1.2.3 == 1", 0, "invalid number"),
            ("12abc", 0, "invalid number"),
            ("1. == 1", 2, "expected digits after '.'"),
        ] {
            assert_eq!(syntax_at(expr), (position, message.to_owned()), "{expr}");
        }
        assert_eq!(
            eval_err("true &&").to_string(),
            "syntax error at position 7: expected a value, found the end"
        );
    }

    #[test]
    fn huge_numbers_are_rejected_not_truncated() {
        let expr = format!("{} > 1", "9".repeat(400));
        assert_eq!(syntax_at(&expr), (0, "number out of range".into()));
        assert!(eval_ok(&format!("{} > 1", "9".repeat(30))));
    }

    #[test]
    fn depth_is_bounded() {
        let nested = |n: usize| format!("{}true{}", "(".repeat(n), ")".repeat(n));
        assert!(eval_ok(&nested(MAX_DEPTH)));
        assert_eq!(
            eval_err(&nested(MAX_DEPTH + 1)),
            ExprError::TooDeep {
                limit: MAX_DEPTH,
                position: MAX_DEPTH
            }
        );
        assert!(eval_ok(&format!("{}true", "!".repeat(MAX_DEPTH))));
        assert!(matches!(
            eval_err(&"!".repeat(MAX_DEPTH + 1)),
            ExprError::TooDeep { .. }
        ));
    }

    #[test]
    fn length_is_bounded() {
        let long = format!("'{}' == ''", "é".repeat(MAX_LEN - 8));
        assert_eq!(long.chars().count(), MAX_LEN);
        assert!(!eval_ok(&long));
        assert_eq!(
            eval_err(&"(".repeat(100_000)),
            ExprError::TooLong {
                len: 100_000,
                limit: MAX_LEN
            }
        );
    }

    #[test]
    fn long_flat_chains_evaluate() {
        let chain = vec!["true"; 120].join(" && ");
        assert!(eval_ok(&chain));
        let chain = vec!["false"; 100].join(" || ");
        assert!(!eval_ok(&chain));
    }

    #[test]
    fn every_root_is_readable() {
        assert!(eval_ok(
            "run.id == 'r1' && workflow.id == 'w1' && secrets.s.k == 'v'"
        ));
    }

    #[test]
    fn comparing_large_values_is_bounded_by_a_budget() {
        let object = |keys: usize| -> Value {
            Value::Object((0..keys).map(|i| (format!("k{i}"), json!(i))).collect())
        };
        let ctx = json!({"trigger": {"payload": {
            "small": object(2_000), "copy": object(2_000),
            "big": object(70_000), "text": "x".repeat(900_000)}}});
        let repeat = |clause: &str, n: usize| clause.repeat(n) + "true";
        let within = [
            // 25 comparisons of 2,000-key objects: 50,000 steps.
            repeat("trigger.payload.small == trigger.payload.copy && ", 20),
            // A 900 KB string compares in about 14,000 steps.
            repeat("trigger.payload.text == trigger.payload.text && ", 7),
            // Only the smaller side is walked: a large object against a number is cheap.
            repeat("trigger.payload.big != 1 && ", 30),
        ];
        for expr in within {
            assert_eq!(evaluate(&expr, &ctx), Ok(true), "{expr}");
        }
        let costly = repeat("trigger.payload.big == trigger.payload.big && ", 20);
        assert_eq!(
            evaluate(&costly, &ctx),
            Err(ExprError::TooCostly {
                limit: MAX_COST,
                position: 66
            }),
            "the second comparison of a 70,000-key object exceeds the budget"
        );
        let many_texts = repeat("trigger.payload.text == trigger.payload.text && ", 8);
        assert!(matches!(
            evaluate(&many_texts, &ctx),
            Err(ExprError::TooCostly { .. })
        ));
    }
}
