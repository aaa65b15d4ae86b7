//! Expansion snapshot tests (prettyplease-formatted) and unit tests of the
//! parse → validate → expand pipeline on `proc_macro2` tokens.
//!
//! Snapshots live in `kopf-macros/tests/snapshots/*.rs`; regenerate them with
//! `UPDATE_SNAPSHOTS=1 cargo test -p kopf-macros --lib` and review the diff.

mod proptests;

use proc_macro2::TokenStream;
use quote::quote;

use crate::handler::handler;
use crate::kinds::Kind;

fn pretty(tokens: TokenStream) -> String {
    let file: syn::File = syn::parse2(tokens).expect("the expansion is a valid file");
    prettyplease::unparse(&file)
}

/// One expansion snapshot: a name (the file under `tests/snapshots`) and an attribute on a fn.
struct Case {
    name: &'static str,
    kind: Kind,
    attr: TokenStream,
    item: TokenStream,
}

/// One case per kind at least, each showing the options of its own group.
fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "on_create_typed",
            kind: Kind::OnCreate,
            attr: quote!(KopfExample, retries = 3, backoff = 1.5),
            item: quote! {
                async fn created(spec: &KopfExampleSpec, name: &str, logger: &kopf::Logger) -> kopf::Result<serde_json::Value> {
                    Ok(serde_json::json!({"name": name, "size": spec.size}))
                }
            },
        },
        Case {
            name: "on_create_named",
            kind: Kind::OnCreate,
            attr: quote!("deployments.apps", id = "deployed"),
            item: quote! {
                async fn created(name: &str) {}
            },
        },
        Case {
            name: "on_resume_keyword",
            kind: Kind::OnResume,
            attr: quote!(kind = "KopfExample", group = "kopf.dev", version = "v1"),
            item: quote! {
                async fn resumed(name: &str) {}
            },
        },
        Case {
            name: "on_update",
            kind: Kind::OnUpdate,
            attr: quote!(
                "kopf.dev/v1",
                "kopfexamples",
                field = "spec.size",
                old = kopf::PRESENT,
                new = 5,
                timeout = 30,
                errors = kopf::ErrorsMode::Permanent
            ),
            item: quote! {
                async fn resized(old: Option<u32>, new: Option<u32>, diff: &kopf::Diff) -> kopf::Result<()> {
                    Ok(())
                }
            },
        },
        Case {
            name: "on_delete",
            kind: Kind::OnDelete,
            attr: quote!(ConfigMap, optional, id = "forget"),
            item: quote! {
                async fn deleted(meta: &ObjectMeta) {}
            },
        },
        Case {
            name: "on_resume",
            kind: Kind::OnResume,
            attr: quote!(
                ConfigMap,
                deleted,
                labels("app" = "demo", "tier" = kopf::ABSENT, "owner" = has_owner)
            ),
            item: quote! {
                fn resumed(reason: kopf::Reason, patch: &kopf::Patch) -> kopf::Result<()> {
                    Ok(())
                }
            },
        },
        Case {
            name: "on_field_blocking",
            kind: Kind::OnField,
            attr: quote!(
                Pod,
                field = "metadata.labels",
                old = kopf::ABSENT,
                new = "x",
                when = is_ready
            ),
            item: quote! {
                fn relabelled(new: Option<String>, by_owner: &kopf::Index) {}
            },
        },
        Case {
            name: "on_event",
            kind: Kind::OnEvent,
            attr: quote!(
                Secret,
                when = is_big,
                annotations("example.com/watch" = kopf::PRESENT),
                param = "verbose"
            ),
            item: quote! {
                async fn spied(r#type: Option<kopf::EventType>, event: &serde_json::Value) {}
            },
        },
        Case {
            name: "timer_dynamic",
            kind: Kind::Timer,
            attr: quote!(
                "",
                "v1",
                "secrets",
                interval = 10,
                no_finalizers,
                annotations("example.com/ttl" = kopf::PRESENT)
            ),
            item: quote! {
                async fn expire(meta: &ObjectMeta, client: kube::Client) -> kopf::Result<()> {
                    Ok(())
                }
            },
        },
        Case {
            name: "daemon",
            kind: Kind::Daemon,
            attr: quote!(
                Pod,
                initial_delay = 3,
                cancellation_backoff = 1,
                cancellation_timeout = 5,
                cancellation_polling = 0.25
            ),
            item: quote! {
                async fn monitor(name: &str, stopped: kopf::Stopped, mut live: kopf::LiveBody) -> kopf::Result<()> {
                    Ok(())
                }
            },
        },
        Case {
            name: "daemon_blocking",
            kind: Kind::Daemon,
            attr: quote!(Pod, cancellation_timeout = 5),
            item: quote! {
                fn poll(name: String, stopped: &kopf::Stopped) -> kopf::Result<()> {
                    Ok(())
                }
            },
        },
        Case {
            name: "index",
            kind: Kind::Index,
            attr: quote!(Pod, field = "spec.nodeName", value = kopf::PRESENT),
            item: quote! {
                async fn by_node(namespace: Option<&str>, name: String) -> kopf::Result<serde_json::Value> {
                    Ok(serde_json::json!({ namespace.unwrap_or_default(): name }))
                }
            },
        },
        Case {
            name: "on_startup",
            kind: Kind::OnStartup,
            attr: quote!(),
            item: quote! {
                async fn boot(logger: kopf::Logger) {}
            },
        },
        Case {
            name: "on_cleanup",
            kind: Kind::OnCleanup,
            attr: quote!(retries = 1, backoff = 0.5),
            item: quote! {
                fn bye(retry: u32) {}
            },
        },
        Case {
            name: "on_probe",
            kind: Kind::OnProbe,
            attr: quote!(id = "ready"),
            item: quote! {
                async fn probe(runtime: std::time::Duration) -> kopf::Result<u64> {
                    Ok(runtime.as_secs())
                }
            },
        },
        Case {
            name: "on_login",
            kind: Kind::OnLogin,
            attr: quote!(timeout = 60),
            item: quote! {
                async fn login(started: Option<jiff::Timestamp>) -> kopf::Result<serde_json::Value> {
                    Ok(serde_json::json!({"server": "https://127.0.0.1:6443"}))
                }
            },
        },
        Case {
            name: "on_validate",
            kind: Kind::OnValidate,
            attr: quote!(
                "kopf.dev",
                "v1",
                "kopfexamples",
                operations("CREATE", "UPDATE"),
                persistent,
                side_effects = false
            ),
            item: quote! {
                async fn check(spec: &Spec, warnings: &kopf::Warnings, dryrun: bool) -> kopf::Result<()> {
                    Ok(())
                }
            },
        },
        Case {
            name: "on_mutate",
            kind: Kind::OnMutate,
            attr: quote!(
                "kopf.dev",
                "v1",
                "kopfexamples",
                subresource = "status",
                ignore_failures,
                labels("app" = "demo")
            ),
            item: quote! {
                async fn mutate(patch: &kopf::Patch, operation: kopf::Operation) -> kopf::Result<()> {
                    Ok(())
                }
            },
        },
    ]
}

#[test]
fn expansion_snapshots_of_every_kind() {
    let cases = cases();
    for kind in Kind::all() {
        assert!(
            cases.iter().any(|case| case.kind == *kind),
            "no expansion snapshot of `{}`",
            kind.name()
        );
    }
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots");
    let update = std::env::var_os("UPDATE_SNAPSHOTS").is_some();
    let mut differing = Vec::new();
    for case in cases {
        let actual = pretty(handler(case.kind, case.attr, case.item));
        assert!(
            !actual.contains("compile_error"),
            "snapshot {} does not expand:\n{actual}",
            case.name
        );
        let path = dir.join(format!("{}.rs", case.name));
        if update {
            std::fs::write(&path, &actual).expect("write the snapshot");
            continue;
        }
        let expected = std::fs::read_to_string(&path).unwrap_or_default();
        if expected != actual {
            eprintln!("--- {} (actual) ---\n{actual}", case.name);
            differing.push(case.name);
        }
    }
    assert!(
        differing.is_empty(),
        "snapshots {differing:?} differ; rerun with UPDATE_SNAPSHOTS=1 and review the diff"
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
fn unknown_options_list_the_valid_ones_and_suggest_the_closest() {
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
            "unknown option `retry`; valid options for `on_create` are: `id`, `param`, `retries`, `backoff`, `timeout`, `errors`, `labels`, `annotations`, `when`, `field`, `value`; did you mean `retries`?"
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

#[test]
fn a_duplicate_option_is_rejected_even_after_an_invalid_first_value() {
    let errors = errors(
        Kind::Timer,
        quote!(Pod, interval = "x", interval = 5, sharp, sharp = false),
        quote!(
            async fn t() {}
        ),
    );
    assert_eq!(
        errors,
        [
            "`interval` expects a non-negative number of seconds, e.g. `interval = 10` or `interval = 0.5`",
            "duplicate option `interval`; set it once",
            "`interval` first set here",
            "duplicate option `sharp`; set it once",
            "`sharp` first set here",
        ]
    );
}

#[test]
fn the_record_names_only_the_options_written() {
    let text = handler(
        Kind::Daemon,
        quote!(Pod),
        quote!(
            async fn d() {}
        ),
    )
    .to_string();
    for group in [
        "FilterRecord",
        "RetryRecord",
        "ChangeRecord",
        "TaskRecord",
        "WebhookRecord",
    ] {
        assert!(
            text.contains(&format!("{group} :: DEFAULT ,")),
            "{group}: {text}"
        );
    }
}

#[test]
fn kopf_resource_forms_expand_to_their_selectors() {
    let expanded = |attr: TokenStream| {
        handler(
            Kind::OnCreate,
            attr,
            quote!(
                async fn c() {}
            ),
        )
        .to_string()
    };
    for (attr, expected) in [
        (
            quote!("kopfexamples"),
            "ResourceRef :: named (\"kopfexamples\")",
        ),
        (
            quote!("apps", "deployment"),
            "ResourceRef :: named_in (\"apps\" , \"deployment\")",
        ),
        (
            quote!("kopf.dev", "v1", "KopfExample"),
            "ResourceRef :: dynamic (\"kopf.dev\" , \"v1\" , \"KopfExample\")",
        ),
        (
            quote!(kind = "Deployment"),
            "ResourceRef :: by_kind (\"Deployment\")",
        ),
        (
            quote!(retries = 1, category = "all", group = ""),
            "ResourceRef :: by_category (\"all\") . with_group (\"\")",
        ),
        (
            quote!(version = "v1", shortcut = "kex", group = "kopf.dev"),
            "ResourceRef :: by_shortcut (\"kex\") . with_group (\"kopf.dev\") . with_version (\"v1\")",
        ),
    ] {
        let text = expanded(attr);
        assert!(text.contains(expected), "{expected}: {text}");
    }
}

#[test]
fn wrong_resource_forms_say_which_forms_are_accepted() {
    let errors_of = |kind: Kind, attr: TokenStream| {
        errors(
            kind,
            attr,
            quote!(
                async fn f() {}
            ),
        )
    };
    let forms = "in one of Kopf's forms";
    let cases: Vec<(Kind, TokenStream, &str)> = vec![
        (Kind::OnCreate, quote!(id = "x"), forms),
        (Kind::OnCreate, quote!("a", "b", "c", "d"), forms),
        (Kind::OnCreate, quote!(Pod, "pods"), forms),
        (
            Kind::OnCreate,
            quote!("pods", kind = "Pod"),
            "the resource is named twice",
        ),
        (
            Kind::OnCreate,
            quote!(Pod, plural = "pods"),
            "the resource is named twice",
        ),
        (
            Kind::OnCreate,
            quote!(kind = "Pod", plural = "pods"),
            "`kind` and `plural` both name the resource; keep one",
        ),
        (
            Kind::OnCreate,
            quote!(group = "apps"),
            "`group` narrows a keyword name, but there is none",
        ),
        (
            Kind::OnCreate,
            quote!("deployments", version = "v1"),
            "`version` goes with a keyword name only",
        ),
        (
            Kind::OnCreate,
            quote!(kind = Pod),
            "`kind` expects a string literal, e.g. `kind = \"…\"`",
        ),
        (
            Kind::OnCreate,
            quote!(kind = ""),
            "`kind` must not be empty",
        ),
        (
            Kind::OnCreate,
            quote!(kind = "Pod", version = ""),
            "`version` must not be empty",
        ),
        (
            Kind::OnCreate,
            quote!(""),
            "the resource's name must not be empty",
        ),
        (
            Kind::OnCreate,
            quote!("apps", ""),
            "the resource's name must not be empty",
        ),
        (
            Kind::OnCreate,
            quote!("apps/", "deployments"),
            "the resource's version must not be empty",
        ),
        (
            Kind::OnStartup,
            quote!(kind = "Pod"),
            "`on_startup` handlers take no resource; remove it",
        ),
    ];
    for (kind, attr, expected) in cases {
        let shown = attr.to_string();
        let errors = errors_of(kind, attr);
        assert!(
            errors.iter().any(|e| e.contains(expected)),
            "{shown}: {errors:?}"
        );
    }
    let duplicate = errors_of(Kind::OnCreate, quote!(kind = "Pod", kind = "Pod"));
    assert_eq!(
        duplicate,
        [
            "duplicate option `kind`; set it once",
            "`kind` first set here"
        ]
    );
}
