//! Property tests: no attribute argument makes the macros panic. Whatever the
//! tokens, `handler` returns either the expansion or the fn next to
//! `compile_error!`s, and either way a file that parses.

use std::str::FromStr;

use proc_macro2::{Literal, TokenStream};
use proptest::prelude::*;
use quote::quote;

use crate::handler::handler;
use crate::kinds::Kind;
use crate::options::Options;

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 256,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Every option key of every kind.
fn all_keys() -> Vec<&'static str> {
    let mut keys: Vec<&'static str> = Kind::all()
        .iter()
        .flat_map(|kind| Options::keys(*kind))
        .collect();
    keys.sort_unstable();
    keys.dedup();
    keys
}

/// Single tokens: option keys, types, literals of every kind, punctuation.
fn leaf() -> impl Strategy<Value = String> {
    let mut fixed: Vec<String> = [
        "ConfigMap",
        "Pod",
        "kopf",
        "k8s_openapi",
        "_",
        "r#type",
        "self",
        "fn",
        "async",
        "true",
        "false",
        "None",
        "json",
        "\"kopf.dev/v1\"",
        "\"kopf.dev\"",
        "\"v1\"",
        "\"kopfexamples\"",
        "\"\"",
        "\"/\"",
        "\"a/b/c\"",
        "\"spec.size\"",
        "\".\"",
        "\"permanent\"",
        "\"CREATE\"",
        "0",
        "3",
        "1.5",
        "1e400",
        "0x10",
        "'c'",
        "b\"x\"",
        "18446744073709551616",
        "4294967296",
        "1u8",
        "1.5f32",
        "1_000",
        ",",
        "=",
        "::",
        "<",
        ">",
        "!",
        "|",
        "&",
        "#",
        "-",
        ".",
        "..",
        "?",
        "@",
        ";",
        ":",
        "=>",
        "+",
        "*",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    fixed.extend(all_keys().into_iter().map(String::from));
    prop_oneof![
        8 => proptest::sample::select(fixed),
        1 => any::<String>().prop_map(|s| Literal::string(&s).to_string()),
        1 => any::<i64>().prop_map(|n| n.to_string()),
        1 => any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| Literal::f64_unsuffixed(f).to_string()),
    ]
}

/// Token trees with balanced groups, written out as source text.
fn tokens() -> impl Strategy<Value = String> {
    let tree = leaf().prop_recursive(4, 48, 8, |inner| {
        (
            proptest::sample::select(vec![("(", ")"), ("[", "]"), ("{", "}")]),
            proptest::collection::vec(inner, 0..8),
        )
            .prop_map(|((open, close), children)| format!("{open} {} {close}", children.join(" ")))
    });
    proptest::collection::vec(tree, 0..16).prop_map(|trees| trees.join(" "))
}

/// Values an option may be given, valid for some keys and not for others.
fn value() -> impl Strategy<Value = TokenStream> {
    let fixed = vec![
        quote!(0),
        quote!(3),
        quote!(-1),
        quote!(1.5),
        quote!(-0.5),
        quote!(1e400),
        quote!(u64::MAX),
        quote!(18446744073709551616),
        quote!(4294967296),
        quote!("x"),
        quote!(""),
        quote!("spec.size"),
        quote!(".."),
        quote!("permanent"),
        quote!(true),
        quote!(kopf::PRESENT),
        quote!(kopf::ABSENT),
        quote!(kopf::ErrorsMode::Permanent),
        quote!(path::to::callback),
        quote!(|x| x),
        quote!(json!({"a": 1})),
        quote!(serde_json::json!([1, null])),
        quote!([1, 2]),
        quote!(()),
        quote!(None),
        quote!(Some(1)),
    ];
    prop_oneof![
        6 => proptest::sample::select(fixed),
        1 => any::<String>().prop_map(|s| {
            let literal = Literal::string(&s);
            quote!(#literal)
        }),
        1 => any::<i64>().prop_map(|n| quote!(#n)),
        1 => any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(|f| {
            let literal = Literal::f64_unsuffixed(f);
            quote!(#literal)
        }),
    ]
}

/// One option from the valid keys: `key = value`, `key(…)` or a bare `key`.
fn option() -> impl Strategy<Value = TokenStream> {
    let key = proptest::sample::select(all_keys())
        .prop_map(|key| syn::Ident::new(key, proc_macro2::Span::call_site()));
    let entry = (proptest::option::of(".*"), value()).prop_map(|(key, value)| match key {
        Some(key) => {
            let key = Literal::string(&key);
            quote!(#key = #value)
        }
        None => value,
    });
    prop_oneof![
        3 => (key.clone(), value()).prop_map(|(key, value)| quote!(#key = #value)),
        1 => (key.clone(), proptest::collection::vec(entry, 0..4))
            .prop_map(|(key, entries)| quote!(#key(#(#entries),*))),
        1 => key.prop_map(|key| quote!(#key)),
    ]
}

/// The resource, if any, in each of its spellings (and some misspellings).
fn resource() -> impl Strategy<Value = Option<TokenStream>> {
    proptest::option::of(proptest::sample::select(vec![
        quote!(ConfigMap),
        quote!(k8s_openapi::api::core::v1::Pod),
        quote!("kopf.dev/v1", "kopfexamples"),
        quote!("kopf.dev", "v1", "kopfexamples"),
        quote!("", "v1", "pods"),
        quote!("v1", "pods"),
        quote!("a/b/c", "x"),
        quote!("kopf.dev", "v1", "kopfexamples", "extra"),
    ]))
}

fn kind() -> impl Strategy<Value = Kind> {
    proptest::sample::select(Kind::all().to_vec())
}

/// Fns of several signatures: each kind accepts some and rejects others.
fn item() -> impl Strategy<Value = TokenStream> {
    proptest::sample::select(vec![
        quote!(
            async fn f() {}
        ),
        quote!(
            async fn f(name: &str, logger: &kopf::Logger) -> kopf::Result<()> {
                Ok(())
            }
        ),
        quote!(
            fn g(body: &kopf::Body) -> bool {
                true
            }
        ),
        quote!(
            async fn h(old: Option<u32>, new: Option<u32>, nope: u8) {}
        ),
    ])
}

/// The output is a file that parses: the expansion, or the fn and `compile_error!`s.
fn assert_well_formed(output: TokenStream) -> Result<(), TestCaseError> {
    let text = output.to_string();
    prop_assert!(
        syn::parse2::<syn::File>(output).is_ok(),
        "not a file: {text}"
    );
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn arbitrary_attribute_tokens_never_panic(kind in kind(), attr in tokens(), item in item()) {
        let attr = TokenStream::from_str(&attr).expect("balanced tokens lex");
        assert_well_formed(handler(kind, attr, item))?;
    }

    #[test]
    fn arbitrary_items_never_panic(kind in kind(), item in tokens()) {
        let item = TokenStream::from_str(&item).expect("balanced tokens lex");
        let is_fn = syn::parse2::<syn::ItemFn>(item.clone()).is_ok();
        let output = handler(kind, quote!(ConfigMap), item);
        if is_fn {
            assert_well_formed(output)?;
        } else {
            // Not a fn: the tokens come back as they were, with the error.
            let text = output.to_string();
            prop_assert!(text.contains("compile_error"), "no error: {text}");
        }
    }

    #[test]
    fn arbitrary_option_lists_never_panic(
        kind in kind(),
        resource in resource(),
        options in proptest::collection::vec(option(), 0..6),
        item in item(),
    ) {
        let args = resource.into_iter().chain(options);
        let attr = quote!(#(#args),*);
        assert_well_formed(handler(kind, attr, item))?;
    }
}
