//! `math.calculate`: evaluates an arithmetic expression with a small hand-written parser.
//!
//! Owns the grammar, the list of functions and constants, and the error messages a model sees
//! when it writes a bad expression. It must never execute code or call out to an interpreter:
//! the input comes from an LLM, so the only things it can do are the operations listed below.
//!
//! Grammar, loosest binding first (positions in messages are 1-based character columns):
//!
//! ```text
//! expr     := term (('+' | '-') term)*
//! term     := unary (('*' | '/' | '%') unary)*
//! unary    := ('-' | '+') unary | power
//! power    := primary (('^' | '**') unary)?        right-associative; -2^2 = -(2^2)
//! primary  := number | constant | function '(' expr (',' expr)* ')' | '(' expr ')'
//! ```
//!
//! Parsing builds a tree first and evaluates it afterwards, so a syntax error anywhere is
//! reported before any arithmetic error (`1/0 +` is a syntax error, not a division by zero).

use std::fmt;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::registry::parse_args;
use super::{Effects, Tool, ToolError};
use crate::domain::ErrorCode;

/// The tool's registered name.
pub const NAME: &str = "math.calculate";

/// Longest expression accepted, in characters (the schema says the same).
pub const MAX_EXPRESSION_CHARS: usize = 1000;

/// Deepest nesting of parentheses, calls, unary signs and powers. The parser and evaluator
/// recurse once per level, so this bound is what keeps a hostile input from overflowing the
/// stack of a runtime worker thread.
pub const MAX_DEPTH: usize = 64;

/// The `math.calculate` tool. Stateless: one instance serves every call.
#[derive(Debug, Clone, Copy, Default)]
pub struct Calculate;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    expression: String,
}

#[async_trait]
impl Tool for Calculate {
    fn name(&self) -> &str {
        NAME
    }

    fn description(&self) -> &str {
        "Evaluates an arithmetic expression exactly as written and returns the number. \
         Use it instead of doing arithmetic in your head. Supports numbers (42, 3.5, 1e-3), \
         + - * / % (remainder), ^ or ** (power, right-associative), unary minus, parentheses, \
         the functions sqrt, abs, floor, ceil, round, ln, log10, sin, cos, tan (radians), \
         min and max (any number of arguments), and the constants pi and e."
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "expression": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": MAX_EXPRESSION_CHARS,
                    "description": "The expression to evaluate, e.g. \"(1250 * 0.07) + sqrt(16)\". \
                                    No variables, assignments or implicit multiplication: \
                                    write 2*pi, not 2pi.",
                }
            },
            "required": ["expression"],
            "additionalProperties": false,
        })
    }

    fn effects(&self) -> Effects {
        Effects::None
    }

    async fn call(&self, args: Value, _cancel: &CancellationToken) -> Result<Value, ToolError> {
        // Evaluation is bounded by MAX_EXPRESSION_CHARS and takes microseconds, so there is no
        // point at which waiting on the token would help; the registry checks it around the call.
        let Args { expression } = parse_args(NAME, args)?;
        let result = evaluate(&expression).map_err(ToolError::from)?;
        Ok(json!({ "expression": expression, "result": number_to_json(result) }))
    }
}

/// Why an expression could not be evaluated.
#[derive(Debug, Clone, PartialEq)]
pub enum MathError {
    /// The text is not a valid expression (syntax, unknown name, arity, size limits).
    Invalid(String),
    /// The expression is well formed but its value is undefined or not a finite number.
    Math(String),
}

impl MathError {
    pub fn code(&self) -> ErrorCode {
        match self {
            MathError::Invalid(_) => ErrorCode::InvalidExpression,
            MathError::Math(_) => ErrorCode::MathError,
        }
    }

    fn message(&self) -> &str {
        match self {
            MathError::Invalid(m) | MathError::Math(m) => m,
        }
    }
}

impl fmt::Display for MathError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())
    }
}

impl std::error::Error for MathError {}

impl From<MathError> for ToolError {
    fn from(e: MathError) -> Self {
        let code = e.code();
        match e {
            MathError::Invalid(m) | MathError::Math(m) => ToolError::failed(code, m),
        }
    }
}

/// Evaluates `expression`; the result is always finite.
pub fn evaluate(expression: &str) -> Result<f64, MathError> {
    let chars = expression.chars().count();
    if chars > MAX_EXPRESSION_CHARS {
        return Err(MathError::Invalid(format!(
            "expression is {chars} characters long; the limit is {MAX_EXPRESSION_CHARS}"
        )));
    }
    let tokens = lex(expression)?;
    let mut parser = Parser {
        tokens: &tokens,
        next: 0,
        end: chars + 1,
    };
    let ast = parser.parse()?;
    eval(&ast)
}

/// A finite number as JSON: whole values become integers (`30`, not `30.0`) while they are
/// exactly representable, which is what a model expects to read back for `10 + 20`.
pub fn number_to_json(x: f64) -> Value {
    // 2^53: above it not every integer is representable, so f64 formatting is more honest.
    const EXACT: f64 = 9_007_199_254_740_992.0;
    if x.fract() == 0.0 && x.abs() <= EXACT {
        // The cast is exact here, and -0.0 becomes 0.
        json!(x as i64)
    } else {
        // Non-finite values never get here (eval rejects them), so this is never null.
        json!(x)
    }
}

// ---------------------------------------------------------------------------------------------
// Lexer

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Num(f64),
    Ident(String),
    Op(BinOp),
    LParen,
    RParen,
    Comma,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
    Pow,
}

impl BinOp {
    fn symbol(self) -> &'static str {
        match self {
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::Rem => "%",
            BinOp::Pow => "^",
        }
    }
}

/// A token and its 1-based character column.
#[derive(Debug, Clone)]
struct Spanned {
    tok: Tok,
    pos: usize,
}

fn lex(src: &str) -> Result<Vec<Spanned>, MathError> {
    let chars: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let pos = i + 1;
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        let tok = match c {
            '0'..='9' | '.' => {
                let start = i;
                i = scan_number(&chars, i);
                let text: String = chars[start..i].iter().collect();
                let value: f64 = text.parse().map_err(|_| {
                    MathError::Invalid(format!("malformed number `{text}` at position {pos}"))
                })?;
                if !value.is_finite() {
                    return Err(MathError::Math(format!(
                        "number `{text}` at position {pos} is too large"
                    )));
                }
                out.push(Spanned {
                    tok: Tok::Num(value),
                    pos,
                });
                continue;
            }
            c if c.is_ascii_alphabetic() || c == '_' => {
                let start = i;
                while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
                out.push(Spanned {
                    tok: Tok::Ident(chars[start..i].iter().collect()),
                    pos,
                });
                continue;
            }
            '+' => Tok::Op(BinOp::Add),
            '-' => Tok::Op(BinOp::Sub),
            // `**` is accepted because models often write Python-style powers.
            '*' if chars.get(i + 1) == Some(&'*') => {
                i += 1;
                Tok::Op(BinOp::Pow)
            }
            '*' => Tok::Op(BinOp::Mul),
            '/' => Tok::Op(BinOp::Div),
            '%' => Tok::Op(BinOp::Rem),
            '^' => Tok::Op(BinOp::Pow),
            '(' => Tok::LParen,
            ')' => Tok::RParen,
            ',' => Tok::Comma,
            other => {
                return Err(MathError::Invalid(format!(
                    "unexpected character `{other}` at position {pos}"
                )));
            }
        };
        out.push(Spanned { tok, pos });
        i += 1;
    }
    Ok(out)
}

/// Returns the index just past the number starting at `i`: digits and dots, then an optional
/// exponent. Anything it accepts that `f64::from_str` rejects (`.`, `1..2`) is reported by the
/// caller as a malformed number.
fn scan_number(chars: &[char], mut i: usize) -> usize {
    // Dots are taken greedily so that `1.2.3` is one malformed number rather than two numbers
    // side by side, which would get a misleading "missing an operator" message.
    while i < chars.len() && (chars[i].is_ascii_digit() || chars[i] == '.') {
        i += 1;
    }
    if matches!(chars.get(i), Some('e' | 'E')) {
        // Only an exponent if digits follow; otherwise `2e` is left for the parser to reject
        // as a number followed by the constant `e`.
        let mut j = i + 1;
        if matches!(chars.get(j), Some('+' | '-')) {
            j += 1;
        }
        if chars.get(j).is_some_and(char::is_ascii_digit) {
            i = j;
            while i < chars.len() && chars[i].is_ascii_digit() {
                i += 1;
            }
        }
    }
    i
}

// ---------------------------------------------------------------------------------------------
// Parser

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Func {
    Sqrt,
    Abs,
    Floor,
    Ceil,
    Round,
    Ln,
    Log10,
    Sin,
    Cos,
    Tan,
    Min,
    Max,
}

const FUNCTIONS: &[(&str, Func)] = &[
    ("sqrt", Func::Sqrt),
    ("abs", Func::Abs),
    ("floor", Func::Floor),
    ("ceil", Func::Ceil),
    ("round", Func::Round),
    ("ln", Func::Ln),
    ("log10", Func::Log10),
    ("sin", Func::Sin),
    ("cos", Func::Cos),
    ("tan", Func::Tan),
    ("min", Func::Min),
    ("max", Func::Max),
];

const CONSTANTS: &[(&str, f64)] = &[("pi", std::f64::consts::PI), ("e", std::f64::consts::E)];

#[derive(Debug)]
enum Ast {
    Num(f64),
    Neg(Box<Ast>),
    Bin {
        op: BinOp,
        pos: usize,
        lhs: Box<Ast>,
        rhs: Box<Ast>,
    },
    Call {
        func: Func,
        name: String,
        pos: usize,
        args: Vec<Ast>,
    },
}

struct Parser<'a> {
    tokens: &'a [Spanned],
    next: usize,
    /// The column just past the input, used when the input ends too early.
    end: usize,
}

impl Parser<'_> {
    fn parse(&mut self) -> Result<Ast, MathError> {
        if self.tokens.is_empty() {
            return Err(MathError::Invalid("expression is empty".into()));
        }
        let ast = self.expr(0)?;
        match self.tokens.get(self.next) {
            None => Ok(ast),
            Some(Spanned {
                tok: Tok::RParen,
                pos,
            }) => Err(MathError::Invalid(format!(
                "unmatched `)` at position {pos}"
            ))),
            Some(t) => Err(unexpected(t)),
        }
    }

    fn peek(&self) -> Option<&Spanned> {
        self.tokens.get(self.next)
    }

    fn bump(&mut self) -> Option<&Spanned> {
        let t = self.tokens.get(self.next);
        self.next += 1;
        t
    }

    fn enter(&self, depth: usize) -> Result<usize, MathError> {
        if depth >= MAX_DEPTH {
            let pos = self.peek().map_or(self.end, |t| t.pos);
            return Err(MathError::Invalid(format!(
                "expression nests more than {MAX_DEPTH} levels deep at position {pos}"
            )));
        }
        Ok(depth + 1)
    }

    fn expr(&mut self, depth: usize) -> Result<Ast, MathError> {
        let mut lhs = self.term(depth)?;
        while let Some(&Spanned {
            tok: Tok::Op(op @ (BinOp::Add | BinOp::Sub)),
            pos,
        }) = self.peek()
        {
            self.next += 1;
            let rhs = self.term(depth)?;
            lhs = Ast::Bin {
                op,
                pos,
                lhs: Box::new(lhs),
                rhs: Box::new(rhs),
            };
        }
        Ok(lhs)
    }

    fn term(&mut self, depth: usize) -> Result<Ast, MathError> {
        let mut lhs = self.unary(depth)?;
        while let Some(&Spanned {
            tok: Tok::Op(op @ (BinOp::Mul | BinOp::Div | BinOp::Rem)),
            pos,
        }) = self.peek()
        {
            self.next += 1;
            let rhs = self.unary(depth)?;
            lhs = Ast::Bin {
                op,
                pos,
                lhs: Box::new(lhs),
                rhs: Box::new(rhs),
            };
        }
        Ok(lhs)
    }

    fn unary(&mut self, depth: usize) -> Result<Ast, MathError> {
        match self.peek() {
            Some(Spanned {
                tok: Tok::Op(BinOp::Sub),
                ..
            }) => {
                let depth = self.enter(depth)?;
                self.next += 1;
                Ok(Ast::Neg(Box::new(self.unary(depth)?)))
            }
            Some(Spanned {
                tok: Tok::Op(BinOp::Add),
                ..
            }) => {
                let depth = self.enter(depth)?;
                self.next += 1;
                self.unary(depth)
            }
            _ => self.power(depth),
        }
    }

    fn power(&mut self, depth: usize) -> Result<Ast, MathError> {
        let base = self.primary(depth)?;
        if let Some(&Spanned {
            tok: Tok::Op(BinOp::Pow),
            pos,
        }) = self.peek()
        {
            let depth = self.enter(depth)?;
            self.next += 1;
            // The exponent is parsed as `unary`, which makes `^` right-associative and allows
            // a signed exponent: 2^3^2 = 2^9, 2^-1 = 0.5.
            let exponent = self.unary(depth)?;
            return Ok(Ast::Bin {
                op: BinOp::Pow,
                pos,
                lhs: Box::new(base),
                rhs: Box::new(exponent),
            });
        }
        Ok(base)
    }

    fn primary(&mut self, depth: usize) -> Result<Ast, MathError> {
        let end = self.end;
        let Some(t) = self.bump().cloned() else {
            return Err(MathError::Invalid(format!(
                "expression ends too early at position {end}: expected a number, a name or `(`"
            )));
        };
        match t.tok {
            Tok::Num(x) => Ok(Ast::Num(x)),
            Tok::LParen => {
                let depth = self.enter(depth)?;
                let inner = self.expr(depth)?;
                self.expect_close(t.pos)?;
                Ok(inner)
            }
            Tok::Ident(name) => self.name(name, t.pos, depth),
            _ => Err(unexpected(&t)),
        }
    }

    fn name(&mut self, name: String, pos: usize, depth: usize) -> Result<Ast, MathError> {
        let is_call = matches!(
            self.peek(),
            Some(Spanned {
                tok: Tok::LParen,
                ..
            })
        );
        if let Some(&(_, func)) = FUNCTIONS.iter().find(|(n, _)| *n == name) {
            if !is_call {
                return Err(MathError::Invalid(format!(
                    "function `{name}` at position {pos} must be called, e.g. {name}(2)"
                )));
            }
            let depth = self.enter(depth)?;
            let open = self.bump().map_or(pos, |t| t.pos);
            let mut args = vec![self.expr(depth)?];
            while let Some(Spanned {
                tok: Tok::Comma, ..
            }) = self.peek()
            {
                self.next += 1;
                args.push(self.expr(depth)?);
            }
            self.expect_close(open)?;
            check_arity(func, &name, pos, args.len())?;
            return Ok(Ast::Call {
                func,
                name,
                pos,
                args,
            });
        }
        if let Some(&(_, value)) = CONSTANTS.iter().find(|(n, _)| *n == name) {
            if is_call {
                return Err(MathError::Invalid(format!(
                    "`{name}` at position {pos} is a constant, not a function"
                )));
            }
            return Ok(Ast::Num(value));
        }
        let hint = match name.as_str() {
            "log" => " (use ln for the natural logarithm or log10 for base 10)",
            "x" | "X" => " (use * for multiplication)",
            _ => "",
        };
        Err(MathError::Invalid(format!(
            "unknown name `{name}` at position {pos}{hint}; known functions: {}; constants: {}",
            FUNCTIONS
                .iter()
                .map(|(n, _)| *n)
                .collect::<Vec<_>>()
                .join(", "),
            CONSTANTS
                .iter()
                .map(|(n, _)| *n)
                .collect::<Vec<_>>()
                .join(", "),
        )))
    }

    fn expect_close(&mut self, open: usize) -> Result<(), MathError> {
        let end = self.end;
        match self.bump() {
            Some(Spanned {
                tok: Tok::RParen, ..
            }) => Ok(()),
            Some(t) => Err(MathError::Invalid(format!(
                "expected `)` to close the `(` at position {open}, found {} at position {}",
                describe(&t.tok),
                t.pos
            ))),
            None => Err(MathError::Invalid(format!(
                "missing `)` at position {end} to close the `(` at position {open}"
            ))),
        }
    }
}

fn check_arity(func: Func, name: &str, pos: usize, n: usize) -> Result<(), MathError> {
    let ok = match func {
        Func::Min | Func::Max => n >= 1,
        _ => n == 1,
    };
    if ok {
        return Ok(());
    }
    Err(MathError::Invalid(format!(
        "function `{name}` at position {pos} takes exactly one argument, got {n}"
    )))
}

fn describe(tok: &Tok) -> String {
    match tok {
        Tok::Num(x) => format!("the number {x}"),
        Tok::Ident(n) => format!("`{n}`"),
        Tok::Op(op) => format!("`{}`", op.symbol()),
        Tok::LParen => "`(`".into(),
        Tok::RParen => "`)`".into(),
        Tok::Comma => "`,`".into(),
    }
}

fn unexpected(t: &Spanned) -> MathError {
    let what = match &t.tok {
        // A value right after a value: the usual cause is implicit multiplication (`2pi`,
        // `3(4)`) or a missing operator, so say so.
        Tok::Ident(n) if n == "x" || n == "X" => format!(
            "unexpected `{n}` at position {}: use * for multiplication",
            t.pos
        ),
        Tok::Num(_) | Tok::Ident(_) | Tok::LParen => {
            format!(
                "unexpected {} at position {}: missing an operator before it? \
                 (write 2*pi, not 2pi)",
                describe(&t.tok),
                t.pos
            )
        }
        Tok::Comma => format!(
            "unexpected `,` at position {}: commas only separate function arguments \
             (write 1000, not 1,000)",
            t.pos
        ),
        _ => format!(
            "unexpected {} at position {}: expected a number, a name or `(`",
            describe(&t.tok),
            t.pos
        ),
    };
    MathError::Invalid(what)
}

// ---------------------------------------------------------------------------------------------
// Evaluator

fn eval(ast: &Ast) -> Result<f64, MathError> {
    match ast {
        Ast::Num(x) => Ok(*x),
        Ast::Neg(inner) => Ok(-eval(inner)?),
        Ast::Bin { op, pos, lhs, rhs } => {
            let (a, b) = (eval(lhs)?, eval(rhs)?);
            let value = match op {
                BinOp::Add => a + b,
                BinOp::Sub => a - b,
                BinOp::Mul => a * b,
                BinOp::Div | BinOp::Rem if b == 0.0 => {
                    return Err(MathError::Math(format!(
                        "division by zero at position {pos}"
                    )));
                }
                BinOp::Div => a / b,
                // Truncated remainder, sign of the dividend (as in C, Rust, JavaScript).
                BinOp::Rem => a % b,
                BinOp::Pow => {
                    if a == 0.0 && b < 0.0 {
                        return Err(MathError::Math(format!(
                            "division by zero at position {pos}: 0 raised to a negative power"
                        )));
                    }
                    a.powf(b)
                }
            };
            finite(value, || format!("`{}` at position {pos}", op.symbol()))
        }
        Ast::Call {
            func,
            name,
            pos,
            args,
        } => {
            let values = args.iter().map(eval).collect::<Result<Vec<_>, _>>()?;
            // Arity was checked while parsing; min/max have at least one argument.
            let x = values[0];
            let domain = |what: &str| {
                Err(MathError::Math(format!(
                    "{name}({x}) at position {pos} is undefined: {what}"
                )))
            };
            let value = match func {
                Func::Sqrt if x < 0.0 => return domain("the argument is negative"),
                Func::Ln | Func::Log10 if x <= 0.0 => {
                    return domain("the argument must be greater than 0");
                }
                Func::Sqrt => x.sqrt(),
                Func::Abs => x.abs(),
                Func::Floor => x.floor(),
                Func::Ceil => x.ceil(),
                // Half away from zero: round(2.5) = 3, round(-2.5) = -3.
                Func::Round => x.round(),
                Func::Ln => x.ln(),
                Func::Log10 => x.log10(),
                Func::Sin => x.sin(),
                Func::Cos => x.cos(),
                Func::Tan => x.tan(),
                Func::Min => values.iter().copied().fold(f64::INFINITY, f64::min),
                Func::Max => values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            };
            finite(value, || format!("{name}(…) at position {pos}"))
        }
    }
}

fn finite(value: f64, what: impl FnOnce() -> String) -> Result<f64, MathError> {
    if value.is_finite() {
        return Ok(value);
    }
    let kind = if value.is_nan() {
        "is not a real number"
    } else {
        "overflows (the result is too large)"
    };
    Err(MathError::Math(format!("{} {kind}", what())))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Expected outcome of one expression.
    enum Want {
        Value(f64),
        /// Error code and a fragment the message must contain.
        Err(&'static str, &'static str),
    }
    use Want::{Err as E, Value as V};

    fn check(cases: &[(&str, Want)]) {
        for (input, want) in cases {
            let got = evaluate(input);
            match (want, &got) {
                (V(w), Ok(g)) => assert!(
                    (w - g).abs() <= 1e-12 * w.abs().max(1.0),
                    "{input:?}: want {w}, got {g}"
                ),
                (E(code, frag), Result::Err(e)) => {
                    assert_eq!(e.code(), *code, "{input:?}: {e}");
                    assert!(
                        e.to_string().contains(frag),
                        "{input:?}: {e:?} lacks {frag:?}"
                    );
                }
                (V(w), Result::Err(e)) => panic!("{input:?}: want {w}, got error {e:?}"),
                (E(code, _), Ok(g)) => panic!("{input:?}: want {code}, got {g}"),
            }
        }
    }

    #[test]
    fn numbers() {
        check(&[
            ("42", V(42.0)),
            ("3.25", V(3.25)),
            (".5", V(0.5)),
            ("5.", V(5.0)),
            ("1e3", V(1000.0)),
            ("1E+3", V(1000.0)),
            ("2.5e-2", V(0.025)),
            ("  7  ", V(7.0)),
            ("\t1\n+\n2", V(3.0)),
            ("pi", V(std::f64::consts::PI)),
            ("e", V(std::f64::consts::E)),
            ("2*e", V(2.0 * std::f64::consts::E)),
        ]);
    }

    #[test]
    fn precedence_and_associativity() {
        check(&[
            ("10 + 20", V(30.0)),
            ("1 + 2 * 3", V(7.0)),
            ("(1 + 2) * 3", V(9.0)),
            ("10 - 4 - 3", V(3.0)),
            ("100 / 10 / 5", V(2.0)),
            ("7 % 4", V(3.0)),
            ("-7 % 4", V(-3.0)),
            ("7.5 % 2", V(1.5)),
            ("2 + 10 % 4 * 3", V(8.0)),
            ("2 ^ 10", V(1024.0)),
            ("2 ** 10", V(1024.0)),
            ("2 ^ 3 ^ 2", V(512.0)),
            ("(2 ^ 3) ^ 2", V(64.0)),
            ("-2 ^ 2", V(-4.0)),
            ("(-2) ^ 2", V(4.0)),
            ("2 ^ -1", V(0.5)),
            ("2 * 3 ^ 2", V(18.0)),
            ("--3", V(3.0)),
            ("-+-3", V(3.0)),
            ("+4", V(4.0)),
            ("3 - -2", V(5.0)),
            ("((((1))))", V(1.0)),
            ("1 / 4", V(0.25)),
            ("0.1 * 3 - 0.3", V(0.0)),
        ]);
    }

    #[test]
    fn functions() {
        check(&[
            ("sqrt(16)", V(4.0)),
            ("sqrt(2) ^ 2", V(2.0)),
            ("abs(-3.5)", V(3.5)),
            ("floor(2.7)", V(2.0)),
            ("floor(-2.1)", V(-3.0)),
            ("ceil(2.1)", V(3.0)),
            ("round(2.5)", V(3.0)),
            ("round(-2.5)", V(-3.0)),
            ("round(2.4)", V(2.0)),
            ("ln(e)", V(1.0)),
            ("log10(1000)", V(3.0)),
            ("sin(0)", V(0.0)),
            ("cos(pi)", V(-1.0)),
            ("tan(pi / 4)", V(1.0)),
            ("min(3, 1, 2)", V(1.0)),
            ("max(3, 1, 2)", V(3.0)),
            ("max(-1)", V(-1.0)),
            ("max(1, 2) * min(4, 5)", V(8.0)),
            ("sqrt(abs(-81)) + 1", V(10.0)),
            ("(1250 * 0.07) + sqrt(16)", V(91.5)),
        ]);
    }

    #[test]
    fn syntax_errors_name_the_position() {
        check(&[
            ("", E("invalid_expression", "empty")),
            ("   ", E("invalid_expression", "empty")),
            (
                "1 +",
                E("invalid_expression", "ends too early at position 4"),
            ),
            (
                "* 2",
                E("invalid_expression", "unexpected `*` at position 1"),
            ),
            ("1 2", E("invalid_expression", "missing an operator")),
            ("2pi", E("invalid_expression", "write 2*pi")),
            ("3(4)", E("invalid_expression", "position 2")),
            (
                "(1 + 2",
                E("invalid_expression", "missing `)` at position 7"),
            ),
            (
                "1 + 2)",
                E("invalid_expression", "unmatched `)` at position 6"),
            ),
            (
                "()",
                E("invalid_expression", "unexpected `)` at position 2"),
            ),
            ("1,000", E("invalid_expression", "commas only separate")),
            (
                "1 $ 2",
                E(
                    "invalid_expression",
                    "unexpected character `$` at position 3",
                ),
            ),
            ("1 × 2", E("invalid_expression", "`×` at position 3")),
            ("1..2", E("invalid_expression", "malformed number `1..2`")),
            (".", E("invalid_expression", "malformed number")),
            ("2 ^^ 3", E("invalid_expression", "unexpected `^`")),
            ("1 = 1", E("invalid_expression", "`=`")),
            ("1/0 +", E("invalid_expression", "ends too early")),
            (
                "sqrt(1, 2)",
                E("invalid_expression", "exactly one argument, got 2"),
            ),
            ("min()", E("invalid_expression", "unexpected `)`")),
            ("sqrt 4", E("invalid_expression", "must be called")),
            (
                "sqrt(4",
                E("invalid_expression", "close the `(` at position 5"),
            ),
            ("pi(2)", E("invalid_expression", "is a constant")),
        ]);
    }

    #[test]
    fn unknown_names_list_what_is_known() {
        check(&[
            (
                "foo + 1",
                E("invalid_expression", "unknown name `foo` at position 1"),
            ),
            ("log(10)", E("invalid_expression", "log10 for base 10")),
            ("2 x 3", E("invalid_expression", "use * for multiplication")),
            ("PI", E("invalid_expression", "constants: pi, e")),
            ("exec(1)", E("invalid_expression", "known functions: sqrt")),
        ]);
    }

    #[test]
    fn arithmetic_errors() {
        check(&[
            ("1 / 0", E("math_error", "division by zero at position 3")),
            ("5 % 0", E("math_error", "division by zero")),
            ("1 / (2 - 2)", E("math_error", "division by zero")),
            ("0 ^ -1", E("math_error", "division by zero")),
            (
                "sqrt(-1)",
                E("math_error", "sqrt(-1) at position 1 is undefined"),
            ),
            ("ln(0)", E("math_error", "greater than 0")),
            ("log10(-5)", E("math_error", "greater than 0")),
            ("10 ^ 400", E("math_error", "overflows")),
            ("1e308 * 10", E("math_error", "`*` at position 7 overflows")),
            ("1e999", E("math_error", "too large")),
            ("(-8) ^ (1/3)", E("math_error", "not a real number")),
        ]);
    }

    #[test]
    fn limits() {
        let n = MAX_DEPTH + 1;
        let deep = format!("{}1{}", "(".repeat(n), ")".repeat(n));
        let ok = format!("{}1{}", "(".repeat(MAX_DEPTH), ")".repeat(MAX_DEPTH));
        let signs = format!("{}1", "-".repeat(n));
        let powers = vec!["1"; n + 1].join("^");
        let calls = format!("{}1{}", "abs(".repeat(n), ")".repeat(n));
        let long = "1+".repeat(500) + "1";
        let flat = "1+".repeat(499) + "1";
        check(&[
            (&deep, E("invalid_expression", "more than 64 levels")),
            (&ok, V(1.0)),
            (&signs, E("invalid_expression", "more than 64 levels")),
            (&powers, E("invalid_expression", "more than 64 levels")),
            (&calls, E("invalid_expression", "more than 64 levels")),
            (&long, E("invalid_expression", "1001 characters long")),
            // Long flat chains are not nesting: 500 terms evaluate fine.
            (&flat, V(500.0)),
        ]);
    }

    #[test]
    fn whole_results_are_json_integers() {
        assert_eq!(number_to_json(30.0), json!(30));
        assert_eq!(number_to_json(-0.0), json!(0));
        assert_eq!(number_to_json(-12.0), json!(-12));
        assert_eq!(number_to_json(0.25), json!(0.25));
        assert_eq!(number_to_json(1e300), json!(1e300));
        assert_eq!(
            number_to_json(9_007_199_254_740_992.0),
            json!(9_007_199_254_740_992_i64)
        );
        assert_eq!(number_to_json(30.0).to_string(), "30");
    }

    #[tokio::test]
    async fn tool_returns_expression_and_result() {
        let cancel = CancellationToken::new();
        let out = Calculate
            .call(json!({"expression": "10 + 20"}), &cancel)
            .await
            .unwrap();
        assert_eq!(out, json!({"expression": "10 + 20", "result": 30}));
        assert_eq!(out.to_string(), r#"{"expression":"10 + 20","result":30}"#);

        let err = Calculate
            .call(json!({"expression": "1/0"}), &cancel)
            .await
            .unwrap_err();
        assert_eq!(err.code(), "math_error");
        assert_eq!(err.to_string(), "division by zero at position 2");
    }
}
