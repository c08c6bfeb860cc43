//! Command-line values for enums of the libraries, which do not depend on clap: a wrapper type
//! per enum with its names and help, as `#[derive(clap::ValueEnum)]` would give them.

/// `value_enum!(Wrapper(lib::Enum) { lib::Enum::A => "a": "help", ... })`
macro_rules! value_enum {
    ($(#[$m:meta])* $arg:ident($lib:ty) { $($v:expr => $name:literal $(: $help:literal)?),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub struct $arg(pub $lib);

        impl clap::ValueEnum for $arg {
            fn value_variants<'a>() -> &'a [Self] {
                &[$($arg($v)),+]
            }
            fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
                $(
                    if self.0 == $v {
                        return Some(clap::builder::PossibleValue::new($name)$(.help($help))?);
                    }
                )+
                None
            }
        }
    };
}
pub(crate) use value_enum;
