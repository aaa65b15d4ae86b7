//! The clients' side: objects created, changed and deleted at a steady
//! rate, poisoned ones among them ([`poison`](super::poison)).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::{Map, json};

use super::Soak;
use super::client::Deleted;
use super::invariants::{FINALIZER, Obj};
use super::poison::{self, Poison};

/// Every how many creations one is nested too deep, and one garbled.
const POISON_EVERY: u64 = 8;

/// Creates one object (with finalizers or not), poisoned or not.
///
/// # Errors
/// If the emulator keeps failing.
pub async fn create(
    soak: &Soak,
    fin: bool,
    poison: Option<Poison>,
    rng: &mut fastrand::Rng,
) -> anyhow::Result<()> {
    let name = {
        let mut state = soak.lock();
        state.serial += 1;
        format!("soak-{:06}", state.serial)
    };
    let (annotations, fields) = match poison {
        None => (BTreeMap::new(), Map::new()),
        Some(Poison::Deep) => (
            BTreeMap::new(),
            Map::from_iter([(poison::FIELD.to_string(), poison::deep())]),
        ),
        Some(Poison::Garbled) => (poison::garbage(rng), Map::new()),
    };
    let uid = soak.client.create(&name, fin, annotations, fields).await?;
    let mut state = soak.lock();
    state
        .objects
        .insert(uid.clone(), Obj::new(name.clone(), fin, poison));
    state.live.insert(name.clone(), (uid.clone(), 0, 0));
    state.churned.created += 1;
    let what = match poison {
        None => "",
        Some(Poison::Deep) => ", nested too deep",
        Some(Poison::Garbled) => ", with malformed Kopf annotations",
    };
    match poison {
        None => {}
        Some(Poison::Deep) => state.churned.poisoned.deep += 1,
        Some(Poison::Garbled) => state.churned.poisoned.garbled += 1,
    }
    state.event(
        Some(&uid),
        format!("created {name} (finalizers: {fin}{what})"),
    );
    Ok(())
}

/// Makes a served object too deep to decode (`deep`) or decodable again.
///
/// # Errors
/// If the emulator keeps failing.
async fn nest(soak: &Soak, name: &str, deep: bool) -> anyhow::Result<()> {
    let _one = soak.nesting.lock().await;
    nest_now(soak, name, deep).await
}

/// [`nest`], under `soak.nesting`.
async fn nest_now(soak: &Soak, name: &str, deep: bool) -> anyhow::Result<()> {
    let uid = {
        let state = soak.lock();
        let Some((uid, _, _)) = state.live.get(name) else {
            return Ok(());
        };
        uid.clone()
    };
    let value = if deep { poison::deep() } else { json!(null) };
    let found = soak
        .client
        .merge(name, &json!({ poison::FIELD: value }))
        .await?;
    let mut state = soak.lock();
    if let Some(obj) = state.objects.get_mut(&uid) {
        obj.deep = deep;
    }
    if deep {
        state.churned.poisoned.deepened += 1;
    }
    state.event(
        Some(&uid),
        format!(
            "{} {name}{}",
            if deep {
                "nested too deep"
            } else {
                "made decodable"
            },
            if found { "" } else { " (gone)" }
        ),
    );
    Ok(())
}

/// Makes every object made too deep by a change decodable again.
///
/// # Errors
/// If the emulator keeps failing.
pub async fn cure_all(soak: &Soak) -> anyhow::Result<()> {
    let names: Vec<String> = {
        let state = soak.lock();
        state
            .live
            .iter()
            .filter(|(_, (uid, _, _))| {
                state
                    .objects
                    .get(uid)
                    .is_some_and(|obj| obj.deep && obj.poison != Some(Poison::Deep))
            })
            .map(|(name, _)| name.clone())
            .collect()
    };
    for name in names {
        nest(soak, &name, false).await?;
    }
    Ok(())
}

/// Deletes one live object, noting whether it held the operator's finalizer.
///
/// # Errors
/// If the emulator keeps failing.
pub async fn delete(soak: &Soak, name: &str) -> anyhow::Result<()> {
    // Not while the object is being made too deep: see below.
    let _one = soak.nesting.lock().await;
    // The operator cannot release a finalizer from an object it cannot
    // decode: its owner makes it decodable again first.
    let cure = {
        let state = soak.lock();
        state
            .live
            .get(name)
            .and_then(|(uid, _, _)| state.objects.get(uid))
            .is_some_and(|obj| obj.deep && obj.fin && obj.poison != Some(Poison::Deep))
    };
    if cure {
        nest_now(soak, name, false).await?;
    }
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
/// `population` objects alive. One creation in [`POISON_EVERY`] is nested
/// too deep, one garbled; one change in 20 of a served object makes it too
/// deep, and such an object is made decodable again at about a third of
/// the operations on it.
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
            let serial = soak.lock().serial + 1;
            let poison = match serial % POISON_EVERY {
                3 => Some(Poison::Deep),
                7 => Some(Poison::Garbled),
                _ => None,
            };
            let fin = rng.bool();
            create(soak, fin, poison, &mut rng).await?;
        } else {
            let name = &names[rng.usize(..names.len())];
            let (deepened, served) = {
                let state = soak.lock();
                let obj = state
                    .live
                    .get(name)
                    .and_then(|(uid, _, _)| state.objects.get(uid));
                let servable = obj.is_some_and(|obj| obj.poison != Some(Poison::Deep));
                let deep = obj.is_some_and(|obj| obj.deep);
                (servable && deep, servable && !deep)
            };
            match rng.u8(..20) {
                0..=5 if deepened => nest(soak, name, false).await?,
                0..=7 => change(soak, name, false).await?,
                8..=12 => change(soak, name, true).await?,
                13 if served => nest(soak, name, true).await?,
                13 => change(soak, name, true).await?,
                _ => delete(soak, name).await?,
            }
        }
        tokio::time::sleep(pause).await;
    }
    Ok(())
}
