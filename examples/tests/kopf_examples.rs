//! Each of Kopf's examples, ported, does what its README says: each test
//! runs the example's binary with `--emulator` (which creates its demo
//! objects), as a user would, and waits for what the README describes, in
//! the output and on the objects in the example's emulator.

mod support;

use k8s_openapi::api::core::v1::{Event, Pod};
use kopf_examples::{DEMO_NAME, examples_api};
use kube::Api;
use serde_json::{Value, json};
use support::{
    EVENTS_MAY_BE_UNUSED, Example, MANAGED_PATCH_MAY_BE_UNUSED, STATUS_MAY_BE_UNUSED,
    assert_printed_rules_used, at,
};

/// `01-minimal`: the creation is noticed, and the status has the message.
#[tokio::test]
async fn minimal_notices_the_creation_and_sets_the_status() {
    let mut example = Example::start(env!("CARGO_BIN_EXE_minimal"), &[]);
    let api = examples_api(example.client().await);
    example.wait_for("And here we are! Creating:").await;
    example
        .wait_object(&api, DEMO_NAME, "status.create_fn.message", |o| {
            at(o, "/status/create_fn/message") == Some(&json!("hello world"))
        })
        .await;
    example
        .finish(&[EVENTS_MAY_BE_UNUSED, STATUS_MAY_BE_UNUSED])
        .await;
}

/// Kopf's READMEs list the demo objects with `kubectl get kex`: the CRD
/// under `--emulator` is Kopf's `crd.yaml`, with its short names.
#[tokio::test]
async fn kubectl_gets_the_demo_objects_by_their_short_names() {
    let mut example = Example::start(env!("CARGO_BIN_EXE_minimal"), &[]);
    let api = examples_api(example.client().await);
    example
        .wait_object(&api, DEMO_NAME, "the demo object", |o| o.is_some())
        .await;
    for name in ["kex", "kexes", "kopfex", "kopfexes"] {
        let (status, output) = example
            .kubectl(&["get", name, "-n", "default", "-o", "name"])
            .await;
        assert!(status.success(), "kubectl get {name}: {status}: {output}");
        assert!(
            output.contains("kopfexample.kopf.dev/kopf-example-1"),
            "kubectl get {name}: {output}"
        );
    }
    let (status, output) = example.kubectl(&["get", "kex", "-n", "default"]).await;
    assert!(status.success(), "{status}: {output}");
    assert!(output.contains(DEMO_NAME), "{output}");
    let (status, output) = example.terminate().await;
    assert!(status.success(), "{status}: {output}");
}

/// `02-children`: a Pod is created as the object's child, and its UID is
/// in the object's status.
#[tokio::test]
async fn children_creates_an_adopted_pod() {
    let mut example = Example::start(env!("CARGO_BIN_EXE_children"), &[]);
    let client = example.client().await;
    let api = examples_api(client.clone());
    let object = example
        .wait_object(&api, DEMO_NAME, "status.create_fn.children", |o| {
            at(o, "/status/create_fn/children/0").is_some_and(Value::is_string)
        })
        .await
        .expect("the object exists");
    let uid = &object["status"]["create_fn"]["children"][0];
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let pods = pods
        .list(&Default::default())
        .await
        .expect("pods are listed");
    let pod = pods
        .items
        .iter()
        .find(|p| p.metadata.uid.as_deref() == uid.as_str())
        .expect("the child pod exists");
    let owner = &pod.metadata.owner_references.as_ref().expect("an owner")[0];
    assert_eq!(owner.name, DEMO_NAME);
    assert_eq!(
        Some(&owner.uid),
        object["metadata"]["uid"]
            .as_str()
            .map(str::to_owned)
            .as_ref()
    );
    assert_eq!(
        pod.metadata.generate_name.as_deref(),
        Some("kopf-example-1-")
    );
    assert_eq!(
        pod.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("somelabel"))
            .map(String::as_str),
        Some("somevalue")
    );
    let container = &pod.spec.as_ref().expect("a spec").containers[0];
    let env = &container.env.as_ref().expect("env")[0];
    assert_eq!(
        (env.name.as_str(), env.value.as_deref()),
        ("FIELD", Some("value"))
    );
    assert!(container.args.as_ref().expect("args")[0].contains("sleep 1m"));
    example.finish(&[]).await;
}

/// `03-exceptions`: a temporary error is retried until success, regular
/// errors until their retries are spent or at once with `errors =
/// Permanent`, and a permanent error is final.
#[tokio::test]
async fn exceptions_are_retried_or_final_as_declared() {
    let mut example = Example::start(env!("CARGO_BIN_EXE_exceptions"), &[]);
    example
        .wait_for("Handler 'instant_failure_with_only_a_message' failed permanently: Fail once and for all.")
        .await;
    example
        .wait_for("Handler 'instant_failure_with_traceback' failed with an exception. Will stop: An error that is supposed to be recoverable.")
        .await;
    example
        .wait_for("Handler 'eventual_success_with_a_few_messages' succeeded.")
        .await;
    example
        .wait_for("Handler 'eventual_failure_with_tracebacks' has exceeded 3 retries.")
        .await;
    example
        .wait_for("Creation is processed: 1 succeeded; 3 failed.")
        .await;
    let output = example.output();
    assert_eq!(
        output.matches("Handler 'eventual_success_with_a_few_messages' failed temporarily: Expected recoverable error.").count(),
        3,
        "{output}"
    );
    assert_eq!(
        output
            .matches(
                "Handler 'eventual_failure_with_tracebacks' failed with an exception. Will retry"
            )
            .count(),
        3,
        "{output}"
    );
    example
        .finish(&[EVENTS_MAY_BE_UNUSED, STATUS_MAY_BE_UNUSED])
        .await;
}

/// `04-events`: the handler's Events are posted about the object.
#[tokio::test]
async fn events_are_posted_about_the_object() {
    let mut example = Example::start(env!("CARGO_BIN_EXE_events"), &[]);
    let events: Api<Event> = Api::namespaced(example.client().await, "default");
    let posted = example
        .wait_until("the handler's four Events", || async {
            let list = events.list(&Default::default()).await.ok()?;
            let mut ours: Vec<(String, String)> = list
                .items
                .into_iter()
                .filter(|e| e.reason.as_deref() == Some("SomeReason"))
                .filter(|e| e.involved_object.name.as_deref() == Some(DEMO_NAME))
                .map(|e| (e.type_.unwrap_or_default(), e.message.unwrap_or_default()))
                .collect();
            ours.sort();
            (ours.len() >= 4).then_some(ours)
        })
        .await;
    let pairs: Vec<(&str, &str)> = posted
        .iter()
        .map(|(t, m)| (t.as_str(), m.as_str()))
        .collect();
    assert_eq!(
        pairs,
        [
            ("Normal", "Some message"),
            ("Normal", "Some message"),
            ("Warning", "Some exception: Exception text."),
            ("Warning", "Some message"),
        ]
    );
    example.finish(&[STATUS_MAY_BE_UNUSED]).await;
}

/// `05-handlers`: both creation handlers in order (and the field handler,
/// as the field appears), the update and the field handler on a change, both deletion handlers, in the operator's
/// output; the object is gone in the end.
#[tokio::test]
async fn handlers_run_for_creation_update_field_and_deletion() {
    let mut example = Example::start(env!("CARGO_BIN_EXE_handlers"), &[]);
    let api = examples_api(example.client().await);
    example.wait_for("DELETED 2nd").await;
    example
        .wait_object(&api, DEMO_NAME, "the object to be gone", |o| o.is_none())
        .await;
    let output = example.output();
    let printed: Vec<&str> = output
        .lines()
        .filter(|l| !l.contains(" INFO ") && !l.contains(" WARN ") && !l.contains(" DEBUG "))
        .filter(|l| !l.starts_with(kopf_examples::UNUSED_RULES))
        .collect();
    // One handler per step, by id within a kind: the kinds' order is the
    // engine's business, the order within a kind is the ids'.
    let position = |line: &str| {
        printed
            .iter()
            .position(|p| *p == line)
            .unwrap_or_else(|| panic!("{line:?} not printed once in:\n{output}"))
    };
    assert_eq!(printed.len(), 7, "{output}");
    // A field handler runs on creation too, as Kopf's does.
    assert!(
        position("FIELD CHANGED: None -> value") < position("UPDATED"),
        "{output}"
    );
    assert!(
        position("CREATED 1st") < position("CREATED 2nd"),
        "{output}"
    );
    assert!(position("CREATED 2nd") < position("UPDATED"), "{output}");
    assert!(
        position("CREATED 2nd") < position("FIELD CHANGED: value -> newvalue"),
        "{output}"
    );
    assert!(position("UPDATED") < position("DELETED 1st"), "{output}");
    assert!(
        position("DELETED 1st") < position("DELETED 2nd"),
        "{output}"
    );
    assert!(!output.contains("RESUMED"), "{output}");
    example
        .finish(&[EVENTS_MAY_BE_UNUSED, STATUS_MAY_BE_UNUSED])
        .await;
}

/// `06-peering`: of two replicas on one Lease, only the leader serves the
/// object; a `--dev` replica joins and is handed the Lease, the leader
/// pausing first; once it stops, a waiting replica serves again.
#[tokio::test]
async fn peering_serves_from_one_replica_and_hands_over_to_dev() {
    let example = Example::start(env!("CARGO_BIN_EXE_peering"), &[]);
    let (status, output) = example.wait_exit().await;
    assert!(status.success(), "{status}: {output}");
    assert_printed_rules_used(
        "peering",
        &output,
        &[EVENTS_MAY_BE_UNUSED, STATUS_MAY_BE_UNUSED],
    );
    let lines: Vec<&str> = output.lines().collect();
    let line = |text: &str| {
        lines
            .iter()
            .position(|l| l.starts_with(text))
            .unwrap_or_else(|| panic!("no line {text:?} in:\n{output}"))
    };
    // The replicas that ticked in lines[from..to], in order, deduplicated.
    let tickers = |from: usize, to: usize| {
        let mut who: Vec<&str> = lines[from..to]
            .iter()
            .filter(|l| l.contains("Ticking as the leader."))
            .filter_map(|l| l.split("replica=\"").nth(1)?.split('"').next())
            .collect();
        who.dedup();
        who
    };
    let first = ["replica-a", "replica-b"]
        .into_iter()
        .find(|r| lines.contains(&format!("The Lease is {r}'s.").as_str()))
        .unwrap_or_else(|| panic!("neither replica-a nor replica-b led first:\n{output}"));
    // Until the dev replica joins, only the first leader serves.
    assert_eq!(tickers(0, line("Started replica-dev")), [first], "{output}");
    // Once the dev replica leads, only it serves, until it is stopped.
    let dev_leads = line("The Lease is replica-dev's.");
    let dev_stops = line("Stopping replica-dev.");
    assert_eq!(tickers(dev_leads, dev_stops), ["replica-dev"], "{output}");
    // The first leader paused before the dev replica started serving.
    let tick_of = |who: &str| format!("replica=\"{who}\"");
    let paused = lines[..dev_stops]
        .iter()
        .rposition(|l| l.contains(&tick_of(first)));
    let started = lines
        .iter()
        .position(|l| l.contains(&tick_of("replica-dev")));
    assert!(paused < started, "{output}");
    // Then a waiting replica serves again, alone.
    let last = lines[dev_stops..]
        .iter()
        .find_map(|l| l.strip_prefix("The Lease is ")?.strip_suffix("'s."))
        .unwrap_or_else(|| panic!("nobody led after replica-dev:\n{output}"));
    assert!(["replica-a", "replica-b"].contains(&last), "{output}");
    let resumed = line(&format!("The Lease is {last}'s."));
    assert_eq!(
        tickers(resumed, line(&format!("Stopping {last}."))),
        [last],
        "{output}"
    );
    assert!(output.contains("\nDone.\n"), "{output}");
}

/// `07-subhandlers`: one sub-handler per item, each with its own progress,
/// then the parent succeeds.
#[tokio::test]
async fn subhandlers_run_one_per_item() {
    let mut example = Example::start(env!("CARGO_BIN_EXE_subhandlers"), &[]);
    example.wait_for("Handler 'create_fn' succeeded.").await;
    let output = example.output();
    for item in ["item1", "item2"] {
        assert_eq!(
            output
                .matches(&format!("=== Handling creation for {item}. ==="))
                .count(),
            1,
            "{output}"
        );
        assert!(
            output.contains(&format!("Handler 'create_fn/{item}' succeeded.")),
            "{output}"
        );
    }
    let item1 = output
        .find("Handler 'create_fn/item1' succeeded.")
        .expect("logged");
    let item2 = output
        .find("Handler 'create_fn/item2' succeeded.")
        .expect("logged");
    let parent = output
        .find("Handler 'create_fn' succeeded.")
        .expect("logged");
    assert!(item1 < item2 && item2 < parent, "{output}");
    example
        .finish(&[EVENTS_MAY_BE_UNUSED, STATUS_MAY_BE_UNUSED])
        .await;
}

/// `08-events`: every watch event reaches both event handlers; the failing
/// one is logged and ignored, and nothing is stored on the object.
#[tokio::test]
async fn raw_events_reach_the_spies_and_errors_are_ignored() {
    let mut example = Example::start(env!("CARGO_BIN_EXE_raw_events"), &[]);
    let api = examples_api(example.client().await);
    example.wait_for("Event received:").await;
    example
        .wait_for("Handler 'event_fn_with_error' failed with an exception. Will ignore: Oops!")
        .await;
    // A change is another event for both.
    kopf_examples::patch(
        api.clone().into_client(),
        DEMO_NAME,
        json!({"spec": {"field": "changed"}}),
    )
    .await;
    example.wait_for("\"field\":\"changed\"").await;
    example
        .wait_for_count(
            "Handler 'event_fn_with_error' failed with an exception. Will ignore: Oops!",
            2,
        )
        .await;
    let object = api.get(DEMO_NAME).await.expect("the object exists");
    assert!(object.status.is_none(), "{:?}", object.status);
    assert!(
        object.metadata.finalizers.is_none(),
        "{:?}",
        object.metadata.finalizers
    );
    example
        .finish(&[EVENTS_MAY_BE_UNUSED, STATUS_MAY_BE_UNUSED])
        .await;
}

/// `10-builtins`: a Pod is deleted after its lifetime, the task of a Pod
/// deleted first is cancelled, and `kube-*` namespaces are left alone.
#[tokio::test]
async fn builtins_kills_pods_after_their_lifetime() {
    let mut example = Example::start(env!("CARGO_BIN_EXE_builtins"), &[]);
    let client = example.client().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    example
        .wait_for("=== Pod killing is cancelled! object=default/expr2")
        .await;
    example
        .wait_for("=== Pod killing happens NOW! object=default/expr1")
        .await;
    example
        .wait_object(&pods, "expr1", "default/expr1 to be gone", |o| o.is_none())
        .await;
    let system: Api<Pod> = Api::namespaced(client, "kube-system");
    assert!(
        system
            .get_opt("protected")
            .await
            .expect("get works")
            .is_some(),
        "the protected pod is gone"
    );
    let output = example.output();
    assert_eq!(
        output.matches("=== Pod killing happens in 5s.").count(),
        2,
        "{output}"
    );
    assert!(
        !output.contains("=== Pod killing happens in 5s. object=kube-system/protected"),
        "{output}"
    );
    example
        .finish(&[EVENTS_MAY_BE_UNUSED, STATUS_MAY_BE_UNUSED])
        .await;
}

/// `11-filtering-handlers`: only the handlers whose filters match run; the
/// update handler runs on the field's change, and the daemon only while
/// the field has its value.
#[tokio::test]
async fn filtering_runs_only_the_matching_handlers() {
    let mut example = Example::start(env!("CARGO_BIN_EXE_filtering"), &[]);
    example
        .wait_for("Creation is processed: 10 succeeded; 0 failed.")
        .await;
    example.wait_for("Field change is satisfied.").await;
    // The daemon stops once the field has changed, while the operator runs.
    example.wait_for("Field daemon is stopped.").await;
    let output = example.output();
    for line in [
        "Label is matching.",
        "Label is present.",
        "Label is absent.",
        "Label callback matching.",
        "Annotation is matching.",
        "Annotation is present.",
        "Annotation is absent.",
        "Filter satisfied.",
        "Field value is satisfied.",
        "Field presence is satisfied.",
        "Field change is satisfied.",
        "Field daemon is satisfied.",
    ] {
        assert!(
            output.contains(&format!("{line} object=default/kopf-example-1")),
            "{line:?} in:\n{output}"
        );
    }
    for line in [
        "Annotation callback mismatch.",
        "Filter not satisfied.",
        "Field value is not satisfied.",
        "Field presence is not satisfied.",
    ] {
        assert!(!output.contains(line), "{line:?} in:\n{output}");
    }
    example
        .finish(&[EVENTS_MAY_BE_UNUSED, STATUS_MAY_BE_UNUSED])
        .await;
}

/// `12-embedded`: the application runs its steps while the embedded
/// operator greets each object and says good-bye, then stops it and exits.
#[tokio::test]
async fn embedded_operator_runs_beside_the_app_and_stops_with_it() {
    let example = Example::start(env!("CARGO_BIN_EXE_embedded"), &[]);
    let (status, output) = example.wait_exit().await;
    assert!(status.success(), "{status}: {output}");
    assert_printed_rules_used(
        "embedded",
        &output,
        &[EVENTS_MAY_BE_UNUSED, STATUS_MAY_BE_UNUSED],
    );
    let printed: Vec<&str> = output
        .lines()
        .filter(|l| !l.contains(" INFO ") && !l.contains(" WARN ") && !l.contains(" DEBUG "))
        .filter(|l| !l.starts_with(kopf_examples::UNUSED_RULES))
        .collect();
    assert_eq!(
        printed,
        [
            "Starting the main app.",
            "Do the main app activity here. Step 1/3.",
            "Hello, kopf-example-0!",
            "Good bye, kopf-example-0!",
            "Do the main app activity here. Step 2/3.",
            "Hello, kopf-example-1!",
            "Good bye, kopf-example-1!",
            "Do the main app activity here. Step 3/3.",
            "Hello, kopf-example-2!",
            "Good bye, kopf-example-2!",
            "Exiting the main app.",
        ],
        "{output}"
    );
    assert!(output.contains("stopping the operator"), "{output}");
}

/// `13-hooks`: the login handler runs first, then the start-up handlers
/// (one after three temporary failures), before anything is served; on
/// SIGTERM, the clean-up handler stops the background tasks.
#[tokio::test]
async fn hooks_run_at_login_start_up_and_clean_up() {
    let liveness = format!("http://127.0.0.1:{}/healthz", support::free_port());
    let mut example = Example::start(env!("CARGO_BIN_EXE_hooks"), &["--liveness", &liveness]);
    example.wait_for("Starting retried...").await;
    example
        .wait_for("Handler 'startup_fn_retried' succeeded.")
        .await;
    example
        .wait_for("Served by the background task. object=default/demo-1")
        .await;
    example
        .wait_for("Served by the background task. object=default/demo-2")
        .await;
    let output = example.output();
    assert_eq!(
        output
            .matches("Handler 'startup_fn_retried' failed temporarily: Going to succeed in")
            .count(),
        3,
        "{output}"
    );
    let login = output
        .find("Logging in in 2s...")
        .expect("the login handler ran");
    let startup = output
        .find("Initialising the task-lock...")
        .expect("the start-up handler ran");
    let serving = output
        .find("serving the resource")
        .expect("pods are served");
    let retried = output.find("Starting retried...").expect("logged");
    assert!(
        login < startup && startup < serving && retried < serving,
        "{output}"
    );

    let probes = example.probes(|p| p["tasks_count"] == 2).await;
    assert_eq!(
        probes["monitored_objects"],
        json!({"default": ["demo-1", "demo-2"]})
    );

    let output = example
        .finish(&[EVENTS_MAY_BE_UNUSED, STATUS_MAY_BE_UNUSED])
        .await;
    assert!(output.contains("Cleaning up..."), "{output}");
    assert!(
        output.contains("All pod-tasks are requested to stop..."),
        "{output}"
    );
    assert_eq!(
        output.matches("Serving is finished by request.").count(),
        2,
        "{output}"
    );
}

/// `14-daemons`: both daemons start after three failures and ping; on the
/// object's deletion the sync one stops by its flag, the async one is
/// cancelled, and the finalizer is released.
#[tokio::test]
async fn daemons_accompany_the_object_until_it_is_deleted() {
    let mut example = Example::start(env!("CARGO_BIN_EXE_daemons"), &["-v"]);
    let api = examples_api(example.client().await);
    example
        .wait_for("=> Ping from a sync daemon: field=Some(\"value\"), retry=3")
        .await;
    example
        .wait_for("=> Ping from an async daemon: field=Some(\"value\")")
        .await;
    example
        .wait_object(&api, DEMO_NAME, "status.message after 3 failures", |o| {
            at(o, "/status/message") == Some(&json!("Failed 3 times."))
        })
        .await;
    let output = example.output();
    assert_eq!(
        output
            .matches("failed temporarily: Simulated failure.")
            .count(),
        6,
        "{output}"
    );

    api.delete(DEMO_NAME, &Default::default())
        .await
        .expect("deleted");
    example
        .wait_object(&api, DEMO_NAME, "the object to be gone", |o| o.is_none())
        .await;
    example
        .wait_for("task did not exit gracefully; cancelling it")
        .await;
    let output = example.output();
    let cancelled: Vec<&str> = output
        .lines()
        .filter(|l| l.contains("task did not exit gracefully; cancelling it"))
        .collect();
    assert!(
        cancelled.len() == 1 && cancelled[0].contains("handler=background_async"),
        "{output}"
    );
    example
        .finish(&[EVENTS_MAY_BE_UNUSED, STATUS_MAY_BE_UNUSED])
        .await;
}

/// The timestamp at the start of the first line that contains `text`.
fn logged_at(output: &str, text: &str) -> jiff::Timestamp {
    let line = output
        .lines()
        .find(|l| l.contains(text))
        .unwrap_or_else(|| panic!("{text:?} not in:\n{output}"));
    let stamp = line.split_whitespace().next().expect("a timestamp");
    stamp.parse().unwrap_or_else(|e| panic!("{stamp:?}: {e}"))
}

/// `15-timers`: each timer starts once the object has been idle for its
/// `idle` time, then runs every `interval`; without a finalizer, the
/// object goes at once and its timers are stopped.
#[tokio::test]
async fn timers_tick_once_the_object_is_idle() {
    let mut example = Example::start(env!("CARGO_BIN_EXE_timers"), &["-v"]);
    let api = examples_api(example.client().await);
    example
        .wait_for_count("Ping from a sync timer: field=Some(\"value\")", 3)
        .await;
    example
        .wait_for("Ping from an async timer: field=Some(\"value\")")
        .await;
    let output = example.output();
    let created = logged_at(&output, "created a demo KopfExample");
    let sync = logged_at(&output, "Ping from a sync timer");
    let asynchronous = logged_at(&output, "Ping from an async timer");
    let seconds = |t: jiff::Timestamp| t.duration_since(created).as_secs_f64();
    assert!(
        seconds(sync) >= 4.9,
        "the sync timer ticked after {}s",
        seconds(sync)
    );
    assert!(
        seconds(asynchronous) >= 9.9,
        "the async timer ticked after {}s",
        seconds(asynchronous)
    );

    let object = api.get(DEMO_NAME).await.expect("the object exists");
    assert!(
        object.metadata.finalizers.is_none(),
        "{:?}",
        object.metadata.finalizers
    );
    api.delete(DEMO_NAME, &Default::default())
        .await
        .expect("deleted");
    example
        .wait_for("stopping the object's daemons and timers")
        .await;
    example
        .finish(&[EVENTS_MAY_BE_UNUSED, STATUS_MAY_BE_UNUSED])
        .await;
}

/// `16-indexing`: the timer reads both indexes; the running Pods reach the
/// object's status, and follow a Pod's change.
#[tokio::test]
async fn indexing_follows_the_pods() {
    let mut example = Example::start(env!("CARGO_BIN_EXE_indexing"), &[]);
    let client = example.client().await;
    let api = examples_api(client.clone());
    example
        .wait_object(&api, DEMO_NAME, "status.running-pods", |o| {
            at(o, "/status/running-pods") == Some(&json!(["default::web-1", "kube-system::etcd"]))
        })
        .await;
    example.wait_for("app=web: [\"web-1\", \"web-2\"]").await;
    example.wait_for("app=etcd: [\"etcd\"]").await;

    // The probes read the index too.
    let probes = example.probes(|p| p["pod_count"] == 3).await;
    let mut names: Vec<String> = serde_json::from_value(probes["pod_names"].clone())
        .unwrap_or_else(|e| panic!("a list of names: {probes}: {e}"));
    names.sort();
    assert_eq!(names, ["etcd", "web-1", "web-2"]);

    let pods: Api<Pod> = Api::namespaced(client, "default");
    let running = kube::api::Patch::Merge(json!({"status": {"phase": "Running"}}));
    pods.patch_status("web-2", &Default::default(), &running)
        .await
        .expect("the status is patched");
    example
        .wait_object(&api, DEMO_NAME, "web-2 in status.running-pods", |o| {
            at(o, "/status/running-pods")
                == Some(&json!([
                    "default::web-1",
                    "default::web-2",
                    "kube-system::etcd"
                ]))
        })
        .await;
    example
        .finish(&[EVENTS_MAY_BE_UNUSED, STATUS_MAY_BE_UNUSED])
        .await;
}

/// `99-all-at-once`: start-up, creation (with a retry, Events and a child
/// Pod that the event handler notices), update, field, deletion, and the
/// clean-up on SIGTERM.
#[tokio::test]
async fn all_at_once_runs_every_kind_of_handler() {
    let mut example = Example::start(env!("CARGO_BIN_EXE_all_at_once"), &[]);
    let client = example.client().await;
    let api = examples_api(client.clone());
    example.wait_for("Starting in 1s...").await;
    example.wait_for("Starting retried...").await;
    example
        .wait_for("Handler 'create_2' failed with an exception. Will retry: Whoops!")
        .await;
    example
        .wait_for("Creation is processed: 3 succeeded; 0 failed.")
        .await;
    example.wait_for("This pod is special for us.").await;
    example.wait_for("Handling the FIELD = None -> [1,2]").await;
    example.wait_for("Handling the diff").await;
    example.wait_for("Handler 'delete' succeeded.").await;
    example
        .wait_object(&api, DEMO_NAME, "the object to be gone", |o| o.is_none())
        .await;

    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let events = events
        .list(&Default::default())
        .await
        .expect("events are listed");
    let reasons: Vec<(String, String)> = events
        .items
        .into_iter()
        .filter(|e| e.involved_object.name.as_deref() == Some(DEMO_NAME))
        .map(|e| (e.reason.unwrap_or_default(), e.message.unwrap_or_default()))
        .collect();
    assert!(
        reasons.contains(&("AnyReason".into(), String::new())),
        "{reasons:?}"
    );
    assert!(
        reasons.contains(&("SomeReason".into(), "Cannot do something".into())),
        "{reasons:?}"
    );
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let labelled = pods
        .list(&kube::api::ListParams::default().labels("application=kopf-example-10"))
        .await
        .expect("pods are listed");
    assert_eq!(labelled.items.len(), 1, "{:?}", labelled.items);

    let output = example
        .finish(&[EVENTS_MAY_BE_UNUSED, STATUS_MAY_BE_UNUSED])
        .await;
    assert!(output.contains("Cleaning up in 3s..."), "{output}");
    assert!(
        output.contains("Handler 'cleanup_fn' succeeded."),
        "{output}"
    );
}

/// `17-admission`: under `--emulator`, the webhook server runs with a
/// self-signed certificate and the configurations `auto.kopf.dev` are
/// written to the emulator; called as the API server would call it (the
/// URL and CA bundle from the configuration), each handler answers as
/// Kopf's README says.
#[tokio::test]
async fn admission_validates_and_mutates_kopfexamples() {
    use base64::Engine as _;
    use kube::api::{ApiResource, DynamicObject};

    let mut example = Example::start(env!("CARGO_BIN_EXE_admission"), &[]);
    let client = example.client().await;
    let validating: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource {
            group: "admissionregistration.k8s.io".into(),
            version: "v1".into(),
            api_version: "admissionregistration.k8s.io/v1".into(),
            kind: "ValidatingWebhookConfiguration".into(),
            plural: "validatingwebhookconfigurations".into(),
        },
    );
    let hooks = example
        .wait_until("the validating webhooks are configured", || {
            let validating = validating.clone();
            async move {
                let found = validating.get_opt("auto.kopf.dev").await.ok()??;
                let hooks = found.data["webhooks"].as_array()?.clone();
                (hooks.len() == 4
                    && hooks
                        .iter()
                        .all(|h| h["rules"].as_array().is_some_and(|r| !r.is_empty())))
                .then_some(hooks)
            }
        })
        .await;
    let hook = |name: &str| {
        hooks
            .iter()
            .find(|h| h["name"] == format!("{name}.auto.kopf.dev"))
            .unwrap_or_else(|| panic!("no webhook {name} in {hooks:?}"))
            .clone()
    };
    let subresources = hook("validate-subresources");
    assert_eq!(
        subresources["rules"][0]["resources"],
        json!(["kopfexamples/*"])
    );
    let config = &hook("validate1")["clientConfig"];
    let ca = base64::engine::general_purpose::STANDARD
        .decode(config["caBundle"].as_str().expect("a caBundle"))
        .expect("base64");
    let ca = String::from_utf8(ca).expect("PEM");
    let root = config["url"]
        .as_str()
        .expect("a URL")
        .trim_end_matches("/validate1")
        .to_owned();

    let review = |field: &str, labels: Value, dry_run: bool, subresource: Option<&str>| {
        serde_json::to_vec(&json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "u",
                "kind": {"group": "kopf.dev", "version": "v1", "kind": "KopfExample"},
                "resource": {"group": "kopf.dev", "version": "v1", "resource": "kopfexamples"},
                "subResource": subresource,
                "operation": "CREATE",
                "namespace": "default",
                "userInfo": {"username": "tester"},
                "dryRun": dry_run,
                "object": {"apiVersion": "kopf.dev/v1", "kind": "KopfExample",
                           "metadata": {"name": "kex", "namespace": "default", "labels": labels},
                           "spec": {"field": field}, "status": {"field": "value"}},
            }
        }))
        .expect("JSON")
    };
    let call = |id: &str, body: Vec<u8>| {
        let (url, ca) = (format!("{root}/{id}"), ca.clone());
        async move {
            let answer = kopf_tests::https_post(&url, &ca, &body)
                .await
                .unwrap_or_else(|e| panic!("{url}: {e}"));
            assert_eq!(
                answer.status,
                200,
                "{}",
                String::from_utf8_lossy(&answer.body)
            );
            answer.json()["response"].clone()
        }
    };
    let wrong = call("validate1", review("wrong", json!({}), false, None)).await;
    assert_eq!(wrong["allowed"], false);
    assert_eq!(
        wrong["status"],
        json!({"message": "Meh! I don't like it. Change the field.", "code": 500})
    );
    let dry = call("validate1", review("wrong", json!({}), true, None)).await;
    assert_eq!(dry["allowed"], true);
    let lazy = call(
        "validate2/spec.field",
        review("not-allowed", json!({}), false, None),
    )
    .await;
    assert_eq!(lazy["status"]["code"], 555);
    let auth = call("authhook", review("value", json!({}), false, None)).await;
    assert_eq!(
        auth["warnings"],
        json!([
            "Accessing as user-agent: (unidentified)",
            "SSL peer is not identified."
        ])
    );
    let status = call(
        "validate_subresources",
        review("value", json!({}), false, Some("status")),
    )
    .await;
    assert_eq!(status["allowed"], true);
    let differs = call(
        "validate_subresources",
        review("other", json!({}), false, Some("status")),
    )
    .await;
    assert_eq!(
        differs["status"]["message"],
        "status.field MUST be equal to spec.field!"
    );
    let mutated = call(
        "mutate1",
        review("value", json!({"somelabel": "somevalue"}), false, None),
    )
    .await;
    let patch = base64::engine::general_purpose::STANDARD
        .decode(mutated["patch"].as_str().expect("a patch"))
        .expect("base64");
    let patch: Value = serde_json::from_slice(&patch).expect("a JSON patch");
    assert_eq!(
        patch,
        json!([{"op": "add", "path": "/spec/injected", "value": 123}])
    );
    let unlabelled = call("mutate1", review("value", json!({}), false, None)).await;
    assert!(unlabelled.get("patch").is_none(), "{unlabelled}");

    // Through the emulator, which calls the webhooks the configurations name.
    let api = examples_api(client);
    let object = |name: &str, field: &str| -> kopf_examples::KopfExample {
        serde_json::from_value(json!({
            "apiVersion": "kopf.dev/v1", "kind": "KopfExample",
            "metadata": {"name": name, "namespace": "default", "labels": {"somelabel": "somevalue"}},
            "spec": {"field": field},
        }))
        .expect("a KopfExample")
    };
    let refused = api
        .create(&Default::default(), &object("kex-wrong", "wrong"))
        .await
        .expect_err("validate1 denies it");
    assert!(
        refused.to_string().contains("Meh! I don't like it."),
        "{refused}"
    );
    let created = api
        .create(&Default::default(), &object("kex-injected", "value"))
        .await
        .expect("the webhooks allow it");
    assert_eq!(created.spec.extra.get("injected"), Some(&json!(123)));

    example
        .finish(&[
            EVENTS_MAY_BE_UNUSED,
            STATUS_MAY_BE_UNUSED,
            MANAGED_PATCH_MAY_BE_UNUSED,
        ])
        .await;
}

/// `ttl_secrets` (README's first command): the Secrets expire and are
/// deleted by the timer, as the operator's own ServiceAccount, whose
/// rules (with `#[kopf::rbac]`'s delete) are all used.
#[tokio::test]
async fn ttl_secrets_deletes_the_expired_secrets_as_its_service_account() {
    let mut example = Example::start(env!("CARGO_BIN_EXE_ttl_secrets"), &[]);
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(example.client().await, "default");
    example.wait_for("expired after 3s; deleting").await;
    example
        .wait_object(
            &secrets,
            "demo-short-lived",
            "demo-short-lived deleted",
            |o| o.is_none(),
        )
        .await;
    let forever = secrets.get_opt("demo-forever").await.expect("a read");
    assert!(forever.is_some(), "a Secret without a TTL stays");
    example
        .finish(&[EVENTS_MAY_BE_UNUSED, STATUS_MAY_BE_UNUSED])
        .await;
}
