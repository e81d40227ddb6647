//! [`text_enum!`]: an enum whose variants each stand for one stable word (a run status, an
//! event kind), declared with its words in one table. The macro writes the enum with serde's
//! names taken from the table, `ALL` (every variant, in order), `as_str` and `parse`, so the
//! wire, the store and the code read one spelling and none can drift from another.
//!
//! Error codes are the one vocabulary declared elsewhere (`error.rs`'s `error_codes!`): they
//! carry their retryability and keep codes this build does not know.

/// Declares a fieldless enum from a table of `Variant = "word",` lines. The enum gets
/// `Serialize`/`Deserialize` (each variant as its word; do not derive them again), `ALL`,
/// `as_str` and `parse`; its other attributes and its variants' (docs, `#[default]`) are kept.
// The words are `tt`, not `literal`: a `literal` reaches the derives wrapped in an invisible
// group, and utoipa's `ToSchema` then misses the `serde(rename)` (the schema would list the
// variants' Rust names).
macro_rules! text_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $( $(#[$variant_meta:meta])* $variant:ident = $text:tt, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(::serde::Serialize, ::serde::Deserialize)]
        $vis enum $name {
            $( $(#[$variant_meta])* #[serde(rename = $text)] $variant, )+
        }

        #[allow(dead_code)] // not every enum needs all three
        impl $name {
            /// Every variant, in declaration order.
            pub const ALL: [$name; [$($text),+].len()] = [$($name::$variant),+];

            /// The variant's word, as the wire and the store hold it.
            pub fn as_str(self) -> &'static str {
                match self {
                    $( $name::$variant => $text, )+
                }
            }

            /// The variant whose word is `text`.
            pub fn parse(text: &str) -> Option<Self> {
                match text {
                    $( $text => Some($name::$variant), )+
                    _ => None,
                }
            }
        }
    };
}

pub(crate) use text_enum;

#[cfg(test)]
mod tests {
    use serde_json::json;

    text_enum! {
        /// A test enum.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
        enum Light {
            #[default]
            Red = "red",
            /// Documented.
            AmberBlink = "amber_blink",
            Green = "green",
        }
    }

    #[test]
    fn one_table_gives_the_words_the_list_and_serde() {
        assert_eq!(Light::ALL, [Light::Red, Light::AmberBlink, Light::Green]);
        for light in Light::ALL {
            assert_eq!(Light::parse(light.as_str()), Some(light));
            assert_eq!(serde_json::to_value(light).unwrap(), json!(light.as_str()));
            let back: Light = serde_json::from_value(json!(light.as_str())).unwrap();
            assert_eq!(back, light);
        }
        assert_eq!(Light::AmberBlink.as_str(), "amber_blink");
        assert_eq!(Light::parse("Amber_blink"), None);
        assert_eq!(Light::default(), Light::Red);
        let refused = serde_json::from_value::<Light>(json!("blue")).unwrap_err();
        assert_eq!(
            refused.to_string(),
            "unknown variant `blue`, expected one of `red`, `amber_blink`, `green`"
        );
    }
}
