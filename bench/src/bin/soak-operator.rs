//! The operator under `kopf-bench soak`: create, update, field and delete
//! handlers, timers and daemons on ConfigMaps labelled `soak`, with
//! finalizers (`soak-fin=yes`) and without (`soak-fin=no`), each recording
//! its calls (`kopf_bench::soak::records`) for the soak's invariant checks,
//! and whether the body it got held a poisoned object's nesting (`p=1`).
//! It decodes objects nested at most `kopf_bench::soak::poison::MAX_DEPTH`
//! levels deep (`settings.watching.max_depth`), so that the soak's
//! poisoned objects are past it.
//!
//! ```text
//! KOPF_SOAK_RECORDS=records.txt soak-operator --standalone -n default --kubeconfig KC
//! ```
//!
//! `KOPF_SOAK_BREAK=<what>` breaks one guarantee on purpose, in this
//! operator's own handlers and settings (never in the framework), so that a
//! test can see the soak report it (`kopf_bench::soak::Break` lists them).

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use kopf_bench::soak::records;
use kopf_bench::soak::{Break, poison};
use kopf_runtime::settings::OperatorSettings;
use kopf_runtime::{Args, Error, Kwargs, LiveBody, PRESENT, Registry, ResourceRef, Runner};
use serde_json::Value;

/// Records a call on `body`, marked `p=1` if it holds a poisoned nesting.
fn write(kind: &str, uid: &str, name: &str, body: &Value, extra: &[(&str, String)]) {
    if poison::in_body(body) {
        let mut extra = extra.to_vec();
        extra.push(("p", "1".to_string()));
        records::write(kind, uid, name, &extra);
    } else {
        records::write(kind, uid, name, extra);
    }
}

/// `data.<key>` of the object, or `-`.
fn data(kw: &Kwargs, key: &str) -> String {
    kw.body["data"][key]
        .as_str()
        .map_or_else(|| "-".to_string(), str::to_string)
}

fn ids(kw: &Kwargs) -> (String, String) {
    (
        kw.uid().unwrap_or("").to_string(),
        kw.name().unwrap_or("").to_string(),
    )
}

/// Whether a UID is one of "some objects" a break applies to (about half).
fn some(uid: &str) -> bool {
    uid.bytes().last().is_some_and(|b| b % 2 == 0)
}

fn instance() -> String {
    format!("{:016x}", fastrand::u64(..))
}

/// A daemon's body: beats every second until its stop flag is set.
async fn beat(kw: Kwargs, broken: Break) {
    let (uid, name) = ids(&kw);
    let stopped = kw.stopped.clone().unwrap_or_default();
    // The object as it is now, as the daemon sees it.
    let (start, live) = (kw.body.to_arc(), kw.live.clone());
    let body = move || {
        live.as_ref()
            .map_or_else(|| Arc::clone(&start), LiveBody::get)
    };
    let inst = instance();
    write("dstart", &uid, &name, &body(), &[("i", inst.clone())]);
    if broken == Break::DaemonTwice {
        // A second copy of the task for the same object, stopped with it.
        let (uid, name, stopped, body) = (uid.clone(), name.clone(), stopped.clone(), body.clone());
        tokio::spawn(async move {
            let inst = instance();
            write("dstart", &uid, &name, &body(), &[("i", inst.clone())]);
            while !stopped.wait(Duration::from_secs(1)).await {
                write("dbeat", &uid, &name, &body(), &[("i", inst.clone())]);
            }
            write("dstop", &uid, &name, &body(), &[("i", inst)]);
        });
    }
    loop {
        if broken == Break::DaemonIgnoresStop {
            tokio::time::sleep(Duration::from_secs(1)).await;
        } else if stopped.wait(Duration::from_secs(1)).await {
            break;
        }
        write("dbeat", &uid, &name, &body(), &[("i", inst.clone())]);
    }
    write("dstop", &uid, &name, &body(), &[("i", inst)]);
}

fn registry(broken: Break) -> Result<Registry, String> {
    let cms = || ResourceRef::dynamic("", "v1", "configmaps");
    let b = Registry::builder()
        .on_create(cms(), "create", move |kw: Kwargs| async move {
            let (uid, name) = ids(&kw);
            if broken == Break::GarbageSkipped && poison::garbled(&kw.body) {
                return Ok(());
            }
            write(
                "create",
                &uid,
                &name,
                &kw.body,
                &[("v", data(&kw, "v")), ("f", data(&kw, "f"))],
            );
            match broken {
                Break::CreateTwice if kw.retry == 0 => {
                    return Err(Error::temporary("broken on purpose", Duration::ZERO));
                }
                Break::LeakTasks => {
                    tokio::spawn(std::future::pending::<()>());
                }
                Break::LeakMemory => {
                    let leaked: &'static mut [u8] =
                        Box::leak(vec![1u8; 8 << 20].into_boxed_slice());
                    std::hint::black_box(leaked);
                }
                _ => {}
            }
            Ok(())
        })
        .label("soak", PRESENT)
        .on_update(cms(), "update", move |kw: Kwargs| async move {
            let (uid, name) = ids(&kw);
            write(
                "update",
                &uid,
                &name,
                &kw.body,
                &[("v", data(&kw, "v")), ("f", data(&kw, "f"))],
            );
            if broken == Break::UpdateTwice && kw.retry == 0 {
                return Err(Error::temporary("broken on purpose", Duration::ZERO));
            }
            Ok(())
        })
        .label("soak", PRESENT)
        .on_field(cms(), "field", "data.f", move |kw: Kwargs| async move {
            let (uid, name) = ids(&kw);
            let f = data(&kw, "f");
            write("field", &uid, &name, &kw.body, &[("f", f.clone())]);
            if broken == Break::Panic && f == "1" {
                panic!("broken on purpose: the field handler panics");
            }
        })
        .label("soak", PRESENT)
        .on_delete(cms(), "delete", move |kw: Kwargs| async move {
            let (uid, name) = ids(&kw);
            match broken {
                Break::DeleteSkipped if some(&uid) => return Ok(()),
                Break::FinalizerStuck if some(&uid) => {
                    return Err(Error::temporary(
                        "broken on purpose",
                        Duration::from_secs(1),
                    ));
                }
                _ => {}
            }
            write("delete", &uid, &name, &kw.body, &[]);
            Ok(())
        })
        .label("soak-fin", "yes")
        .timer(cms(), "tick", |kw: Kwargs| async move {
            let (uid, name) = ids(&kw);
            write("tick", &uid, &name, &kw.body, &[]);
        })
        .interval(Duration::from_secs(1))
        .label("soak-fin", "yes")
        .daemon(cms(), "beat", move |kw: Kwargs| beat(kw, broken))
        .label("soak-fin", "yes")
        .timer(cms(), "tick-nofin", |kw: Kwargs| async move {
            let (uid, name) = ids(&kw);
            write("tick", &uid, &name, &kw.body, &[]);
        })
        .interval(Duration::from_secs(1))
        .label("soak-fin", "no");
    // Broken: a handler that should keep no finalizer keeps one.
    let b = if broken == Break::NoFinalizersIgnored {
        b
    } else {
        b.no_finalizers()
    };
    b.daemon(cms(), "beat-nofin", move |kw: Kwargs| beat(kw, broken))
        .label("soak-fin", "no")
        .no_finalizers()
        .build()
        .map_err(|e| e.to_string())
}

/// Records the runtime's alive tasks every second.
async fn stats() {
    let mut every = tokio::time::interval(Duration::from_secs(1));
    loop {
        every.tick().await;
        let tasks = tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks();
        records::write("stat", "", "", &[("tasks", tasks.to_string())]);
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let broken = match std::env::var("KOPF_SOAK_BREAK") {
        Ok(name) => match Break::parse(&name) {
            Some(b) => b,
            None => {
                eprintln!(
                    "soak-operator: unknown KOPF_SOAK_BREAK={name:?}; expected one of {}",
                    Break::names()
                );
                return ExitCode::from(2);
            }
        },
        Err(_) => Break::Nothing,
    };
    let registry = match registry(broken) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("soak-operator: {e}");
            return ExitCode::from(2);
        }
    };
    let args = Args::parse();
    let mut settings = OperatorSettings::default();
    // Broken: the poisoned objects decode, and are handled.
    if broken != Break::PoisonDecoded {
        settings.watching.max_depth = poison::MAX_DEPTH;
    }
    let stats = tokio::spawn(stats());
    let result = Runner::new()
        .args(args)
        .settings(settings)
        .registry(registry)
        .run()
        .await;
    stats.abort();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("soak-operator: {e}");
            ExitCode::FAILURE
        }
    }
}
