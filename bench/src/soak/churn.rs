//! The clients' side: objects created, changed and deleted at a steady rate.

use std::time::{Duration, Instant};

use super::Soak;
use super::client::Deleted;
use super::invariants::{FINALIZER, Obj};

/// Creates one object (half of them with finalizers).
///
/// # Errors
/// If the emulator keeps failing.
pub async fn create(soak: &Soak, fin: bool) -> anyhow::Result<()> {
    let name = {
        let mut state = soak.lock();
        state.serial += 1;
        format!("soak-{:06}", state.serial)
    };
    let uid = soak.client.create(&name, fin).await?;
    let mut state = soak.lock();
    state.objects.insert(
        uid.clone(),
        Obj {
            name: name.clone(),
            fin,
            delete_at: None,
            held: false,
            gone: false,
            blocked: false,
        },
    );
    state.live.insert(name.clone(), (uid.clone(), 0, 0));
    state.churned.created += 1;
    state.event(Some(&uid), format!("created {name} (finalizers: {fin})"));
    Ok(())
}

/// Deletes one live object, noting whether it held the operator's finalizer.
///
/// # Errors
/// If the emulator keeps failing.
pub async fn delete(soak: &Soak, name: &str) -> anyhow::Result<()> {
    let uid = {
        let mut state = soak.lock();
        let Some((uid, _, _)) = state.live.remove(name) else {
            return Ok(());
        };
        let now = super::records::now_ns();
        if let Some(obj) = state.objects.get_mut(&uid) {
            obj.delete_at = Some(now);
        }
        state.churned.deleted += 1;
        uid
    };
    let found = soak.client.delete(name).await?;
    let mut state = soak.lock();
    let held = matches!(&found, Deleted::Held(f) if f.iter().any(|f| f == FINALIZER));
    if let Some(obj) = state.objects.get_mut(&uid) {
        obj.held |= held;
    }
    state.event(Some(&uid), format!("deleted {name}: {found:?}"));
    Ok(())
}

/// Changes `data.v` (an update) or `data.f` (an update and a field change).
///
/// # Errors
/// If the emulator keeps failing.
async fn change(soak: &Soak, name: &str, field: bool) -> anyhow::Result<()> {
    let (uid, key, value) = {
        let mut state = soak.lock();
        let Some(entry) = state.live.get_mut(name) else {
            return Ok(());
        };
        let (key, value) = if field {
            entry.2 += 1;
            ("f", entry.2)
        } else {
            entry.1 += 1;
            ("v", entry.1)
        };
        (entry.0.clone(), key, value)
    };
    let found = soak.client.set(name, key, value).await?;
    let mut state = soak.lock();
    state.churned.updated += 1;
    state.event(
        Some(&uid),
        format!(
            "set {name} data.{key}={value}{}",
            if found { "" } else { " (gone)" }
        ),
    );
    Ok(())
}

/// Churns until `until`: about `rate` operations a second, keeping about
/// `population` objects alive.
///
/// # Errors
/// If the emulator keeps failing.
pub async fn run(soak: &Soak, until: Instant, mut rng: fastrand::Rng) -> anyhow::Result<()> {
    let pause = Duration::from_secs_f64(1.0 / soak.config.rate.max(0.01));
    while Instant::now() < until {
        let names: Vec<String> = {
            let state = soak.lock();
            let mut names: Vec<String> = state.live.keys().cloned().collect();
            names.sort();
            names
        };
        let roll = rng.f64();
        let grow = names.len() < soak.config.population;
        if names.is_empty() || (grow && roll < 0.5) {
            create(soak, rng.bool()).await?;
        } else {
            let name = &names[rng.usize(..names.len())];
            match rng.u8(..10) {
                0..=3 => change(soak, name, false).await?,
                4..=6 => change(soak, name, true).await?,
                _ => delete(soak, name).await?,
            }
        }
        tokio::time::sleep(pause).await;
    }
    Ok(())
}
