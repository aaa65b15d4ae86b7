//! Kopf's `12-embedded`: an operator embedded in an application.
//!
//! The application runs the [`kopf::Operator`] in a task of its own, beside
//! its own work, and stops it when it is done: here the "work" is to create
//! and delete three `KopfExample` objects, one step at a time, while the
//! operator greets each on its creation and says good-bye on its deletion.
//! Then the application asks the operator to stop, waits for it, and exits.
//!
//! As in Kopf, the application hands the greetings' templates to the
//! handlers in the operator-wide memo ([`kopf::Operator::memo`]): every
//! object's memo starts with it. The handlers are built without macros
//! ([`kopf::Registry::builder`]), as an embedding application often does.
//! Kopf's `ready_flag` has no equivalent: the application waits, for each
//! object, until the operator has handled it.
//!
//! ```sh
//! # against the cluster in your kubeconfig (with Kopf's CRD applied)
//! cargo run -p kopf-examples --bin embedded
//! # against an in-process Kubernetes API emulator with the CRD
//! cargo run -p kopf-examples --bin embedded -- --emulator
//! ```

use std::io::IsTerminal;
use std::time::Duration;

use kopf_examples::{KopfExample, examples_api};
use kopf_runtime as kopf;
use kube::api::{DeleteParams, PostParams};
use tokio::sync::oneshot;

/// The application's own state, which the handlers use.
struct Templates {
    create: String,
    delete: String,
}

/// The operator of the application: two handlers that read the templates
/// from the memo.
fn registry() -> Result<kopf::Registry, kopf::RegistryError> {
    /// `template`, from the memo, for the object of `kw`.
    fn greeting(kw: &kopf::Kwargs, template: impl Fn(&Templates) -> &str) -> String {
        let templates = kw.memo.get::<Templates>();
        let template = templates.as_deref().map_or("{name}", template);
        template.replace("{name}", kw.name().unwrap_or_default())
    }
    kopf::Registry::builder()
        .on_create(
            kopf::ResourceRef::of::<KopfExample>(),
            "create_fn",
            |kw: kopf::Kwargs| {
                let line = greeting(&kw, |t| &t.create);
                async move { println!("{line}") }
            },
        )
        .on_delete(
            kopf::ResourceRef::of::<KopfExample>(),
            "delete_fn",
            |kw: kopf::Kwargs| {
                let line = greeting(&kw, |t| &t.delete);
                async move { println!("{line}") }
            },
        )
        .build()
}

/// Creates `kopf-example-{step}`, waits until the operator has handled it,
/// deletes it, and waits until it is gone.
async fn step(client: kube::Client, step: usize) -> anyhow::Result<()> {
    let api = examples_api(client.clone());
    let name = format!("kopf-example-{step}");
    let mut object = KopfExample::new(&name, Default::default());
    object.metadata.namespace = Some(kopf_examples::NAMESPACE.into());
    match api.create(&PostParams::default(), &object).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 409 => {}
        Err(error) => return Err(error.into()),
    }
    kopf_examples::wait_handled(client, &name, Duration::from_secs(30)).await;
    match api.delete(&name, &DeleteParams::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 404 => {}
        Err(error) => return Err(error.into()),
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while api.get_opt(&name).await?.is_some() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_ansi(std::io::stdout().is_terminal())
        .init();
    let emulated = std::env::args().skip(1).any(|arg| arg == "--emulator");
    // As `--emulator-rbac` of `kopf::run()`: the emulator enforces RBAC,
    // and the operator runs as its own ServiceAccount with the rules
    // `manifests` would print; the app stays the administrator.
    let rbac = std::env::args().skip(1).any(|arg| arg == "--emulator-rbac");
    if rbac && !emulated {
        anyhow::bail!("--emulator-rbac applies to the emulator: add --emulator");
    }

    // Start the operator, in a task of its own.
    println!("Starting the main app.");
    let (client, emulator) = if emulated {
        let mut builder = kopf_examples::emulator();
        if rbac {
            builder = builder.rbac();
        }
        let emulator = builder.start().await?;
        (emulator.client(), Some(emulator))
    } else {
        (kube::Client::try_default().await?, None)
    };
    let memo = kopf::Memo::new();
    memo.insert(Templates {
        create: "Hello, {name}!".into(),
        delete: "Good bye, {name}!".into(),
    });
    let operator = kopf::Operator::new(registry()?).memo(memo);
    let operator_client = match &emulator {
        Some(emulator) if rbac => {
            operator.grant_on_emulator(emulator, "embedded").await?;
            emulator.client_as_service_account("default", "embedded")?
        }
        _ => client.clone(),
    };
    let (stop, stopped) = oneshot::channel::<()>();
    let operator = tokio::spawn(operator.client(operator_client).run_until(async {
        let _ = stopped.await;
    }));

    // The operator is active: run the app's activity.
    let steps = 3;
    for number in 0..steps {
        println!(
            "Do the main app activity here. Step {}/{steps}.",
            number + 1
        );
        step(client.clone(), number).await?;
    }

    // Ask the operator to terminate gracefully, and wait until it has.
    println!("Exiting the main app.");
    let _ = stop.send(());
    operator.await??;
    if let Some(emulator) = emulator {
        if rbac {
            kopf_examples::rbac_report(&emulator, "embedded").await?;
        }
        emulator.shutdown().await;
    }
    Ok(())
}
