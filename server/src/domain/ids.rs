//! The identities callers name and the tokens the registry issues, each
//! validated once at the edge. Past it, no code holds an empty key, a key
//! with control characters, or a token PostgreSQL could not store.

use std::fmt;

use super::error::FieldViolation;
use super::text::{KEY_MAX_BYTES, NAMESPACE_MAX_BYTES, check_identifier};

/// A validated identifier: non-empty, bounded, no edge white space or controls.
macro_rules! identifier {
    ($(#[$doc:meta])* $name:ident, max = $max:expr) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(String);

        impl $name {
            pub const MAX_BYTES: usize = $max;

            /// Checks a caller's value; the violation names `field`.
            pub fn parse(field: &'static str, value: String) -> Result<Self, FieldViolation> {
                check_identifier(field, &value, Self::MAX_BYTES)?;
                Ok(Self(value))
            }

            /// A value the registry stored itself, validated when it was written.
            pub fn from_stored(value: String) -> Self {
                Self(value)
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }

            pub fn into_string(self) -> String {
                self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        /// Reads as the text it is, for logs, labels and comparisons.
        impl std::ops::Deref for $name {
            type Target = str;

            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }
    };
}

identifier!(
    /// The tenant or domain an operation belongs to; keys are unique within it.
    Namespace,
    max = NAMESPACE_MAX_BYTES
);

identifier!(
    /// An operation's stable business identity within its namespace.
    OperationKey,
    max = KEY_MAX_BYTES
);

/// A lease's fencing token: positive, drawn from one sequence, so a newer lease
/// outranks every older one. Travels as `uint64`, is stored as `bigint`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FencingToken(i64);

impl FencingToken {
    /// A token a caller presents: only values Claim could have issued.
    pub fn parse(field: &'static str, value: u64) -> Result<Self, FieldViolation> {
        match i64::try_from(value) {
            Ok(token) if token > 0 => Ok(Self(token)),
            _ => Err(FieldViolation::new(
                field,
                "must be a token issued by Claim",
            )),
        }
    }

    /// A token read back from the store, where the sequence keeps it positive.
    pub fn from_stored(value: i64) -> Self {
        Self(value)
    }

    /// As the store keeps it.
    pub fn as_i64(self) -> i64 {
        self.0
    }

    /// As the contract carries it.
    pub fn get(self) -> u64 {
        self.0.unsigned_abs()
    }
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_positive_and_fit_a_bigint() {
        assert!(FencingToken::parse("t", 0).is_err());
        assert!(FencingToken::parse("t", u64::MAX).is_err());
        assert_eq!(FencingToken::parse("t", 42).unwrap().get(), 42);
        let largest = u64::try_from(i64::MAX).unwrap();
        assert_eq!(
            FencingToken::parse("t", largest).unwrap().as_i64(),
            i64::MAX
        );
    }

    #[test]
    fn identifiers_are_checked_against_their_own_bound() {
        assert!(Namespace::parse("namespace", "a".repeat(128)).is_ok());
        assert!(Namespace::parse("namespace", "a".repeat(129)).is_err());
        assert!(OperationKey::parse("operation_key", "a".repeat(512)).is_ok());
        assert!(OperationKey::parse("operation_key", " padded".into()).is_err());
    }
}
