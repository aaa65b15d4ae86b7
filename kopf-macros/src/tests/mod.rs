//! Expansion snapshot tests (prettyplease-formatted) and unit tests of the
//! parse → validate → expand pipeline on `proc_macro2` tokens.
//!
//! Snapshots live in `kopf-macros/tests/snapshots/*.rs`; regenerate them with
//! `UPDATE_SNAPSHOTS=1 cargo test -p kopf-macros --lib` and review the diff.

use proc_macro2::TokenStream;
use quote::quote;

use crate::handler::handler;
use crate::kinds::Kind;

fn pretty(tokens: TokenStream) -> String {
    let file: syn::File = syn::parse2(tokens).expect("the expansion is a valid file");
    prettyplease::unparse(&file)
}

fn snapshot(name: &str, kind: Kind, attr: TokenStream, item: TokenStream) {
    let actual = pretty(handler(kind, attr, item));
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/snapshots")
        .join(format!("{name}.rs"));
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
        std::fs::write(&path, &actual).expect("write the snapshot");
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        expected == actual,
        "snapshot {name} differs; rerun with UPDATE_SNAPSHOTS=1 and review\n--- actual ---\n{actual}"
    );
}

#[test]
fn snapshot_on_create_with_a_typed_resource_and_kwargs() {
    snapshot(
        "on_create_typed",
        Kind::OnCreate,
        quote!(KopfExample, retries = 3, backoff = 1.5),
        quote! {
            async fn created(spec: &KopfExampleSpec, name: &str, logger: &kopf::Logger) -> kopf::Result<serde_json::Value> {
                Ok(serde_json::json!({"name": name, "size": spec.size}))
            }
        },
    );
}

#[test]
fn snapshot_timer_with_a_dynamic_resource_and_filters() {
    snapshot(
        "timer_dynamic",
        Kind::Timer,
        quote!(
            "",
            "v1",
            "secrets",
            interval = 10,
            no_finalizers,
            annotations("example.com/ttl" = kopf::PRESENT)
        ),
        quote! {
            async fn expire(meta: &ObjectMeta, client: kube::Client) -> kopf::Result<()> {
                Ok(())
            }
        },
    );
}

#[test]
fn snapshot_blocking_on_field_with_old_new_and_an_index() {
    snapshot(
        "on_field_blocking",
        Kind::OnField,
        quote!(
            Pod,
            field = "metadata.labels",
            old = kopf::ABSENT,
            new = "x",
            when = is_ready
        ),
        quote! {
            fn relabelled(new: Option<String>, by_owner: &kopf::Index) {}
        },
    );
}

#[test]
fn snapshot_activity() {
    snapshot(
        "on_startup",
        Kind::OnStartup,
        quote!(),
        quote! {
            async fn boot(logger: kopf::Logger) {}
        },
    );
}

fn errors(kind: Kind, attr: TokenStream, item: TokenStream) -> Vec<String> {
    let output = handler(kind, attr, item).to_string();
    output
        .split("compile_error !")
        .skip(1)
        .map(|chunk| {
            let start = chunk.find('"').map_or(0, |i| i + 1);
            let end = chunk[start..]
                .find("\" }")
                .map_or(chunk.len(), |i| start + i);
            chunk[start..end].replace("\\\"", "\"")
        })
        .collect()
}

#[test]
fn unknown_options_list_the_valid_ones() {
    let errors = errors(
        Kind::OnCreate,
        quote!(Pod, retry = 3),
        quote!(
            async fn f() {}
        ),
    );
    assert_eq!(
        errors,
        [
            "unknown option `retry`; valid options for `on_create` are: `id`, `param`, `retries`, `backoff`, `timeout`, `errors`, `labels`, `annotations`, `when`, `field`, `value`"
        ]
    );
}

#[test]
fn options_of_other_kinds_say_where_they_belong() {
    let errors = errors(
        Kind::OnUpdate,
        quote!(Pod, no_finalizers),
        quote!(
            async fn f() {}
        ),
    );
    assert_eq!(errors.len(), 1);
    assert!(
        errors[0].starts_with(
            "option `no_finalizers` is not valid for `on_update` (only for `timer`, `daemon`)"
        ),
        "{errors:?}"
    );
}

#[test]
fn all_errors_are_reported_and_the_item_is_kept() {
    let output = handler(
        Kind::Daemon,
        quote!(Pod, retries = "x", retries = 1),
        quote!(
            fn d(nope: u8) {}
        ),
    );
    let text = output.to_string();
    assert!(text.starts_with("fn d (nope : u8) { }"), "{text}");
    assert_eq!(text.matches("compile_error").count(), 4, "{text}");
}

#[test]
fn field_is_required_for_on_field_and_value_excludes_old_new() {
    let errors_field = errors(
        Kind::OnField,
        quote!(Pod),
        quote!(
            async fn f() {}
        ),
    );
    assert_eq!(
        errors_field,
        ["`on_field` needs a field: add `field = \"spec.path\"`"]
    );
    let errors_value = errors(
        Kind::OnUpdate,
        quote!(Pod, field = "a", value = 1, new = 2),
        quote!(
            async fn f() {}
        ),
    );
    assert_eq!(
        errors_value,
        ["use either `value` or `old`/`new`, not both"]
    );
}

#[test]
fn durations_accept_integers_and_floats() {
    let text = handler(
        Kind::Timer,
        quote!(Pod, interval = 2.25, idle = 3),
        quote!(
            async fn t() {}
        ),
    )
    .to_string();
    assert!(
        text.contains("Duration :: new (2u64 , 250000000u32)"),
        "{text}"
    );
    assert!(text.contains("Duration :: new (3u64 , 0u32)"), "{text}");
}

#[test]
fn dynamic_resources_accept_group_slash_version() {
    let text = handler(
        Kind::OnCreate,
        quote!("apps/v1", "deployments"),
        quote!(
            async fn c() {}
        ),
    )
    .to_string();
    assert!(
        text.contains("ResourceRef :: dynamic (\"apps\" , \"v1\" , \"deployments\")"),
        "{text}"
    );
    let text = handler(
        Kind::OnCreate,
        quote!("v1", "pods"),
        quote!(
            async fn c() {}
        ),
    )
    .to_string();
    assert!(
        text.contains("ResourceRef :: dynamic (\"\" , \"v1\" , \"pods\")"),
        "{text}"
    );
}

#[test]
fn underscore_and_raw_parameter_names_are_injected_by_their_kwarg() {
    let text = handler(
        Kind::OnEvent,
        quote!(Pod),
        quote!(
            async fn e(_name: &str, r#type: Option<&str>) {}
        ),
    )
    .to_string();
    assert!(text.contains("NameArg"), "{text}");
    assert!(text.contains("TypeArg"), "{text}");
}

#[test]
fn impl_trait_parameters_are_rejected() {
    let errors = errors(
        Kind::OnCreate,
        quote!(Pod),
        quote!(
            async fn c(name: impl AsRef<str>) {}
        ),
    );
    assert_eq!(
        errors,
        ["`impl Trait` parameters are not supported; name a concrete type"]
    );
}
