//! `settings` in start-up handlers: lent `&mut` (written back when the call
//! ends, async or blocking) or `&` to read them.
use kopf_runtime as kopf;
use kopf_runtime::settings::{OperatorSettings, PostingLevel, StartupSettings};

#[kopf::on_startup]
async fn configure(settings: &mut kopf::OperatorSettings, memo: &kopf::Memo) -> kopf::Result<()> {
    settings.persistence.finalizer = "example.com/finalizer".into();
    memo.insert(settings.persistence.finalizer.clone());
    Ok(())
}

#[kopf::on_startup]
fn configure_blocking(settings: &mut OperatorSettings) {
    settings.posting.level = PostingLevel::Error;
}

#[kopf::on_startup]
async fn read(_settings: &OperatorSettings, retry: u32) {
    let _ = retry;
}

#[tokio::main]
async fn main() {
    let registry = kopf::Registry::from_inventory().expect("valid handlers");
    let settings = StartupSettings::new(OperatorSettings::default());
    for handler in registry.handlers() {
        let mut kwargs = kopf::Kwargs::default();
        kwargs.settings = Some(settings.clone());
        handler.call(kwargs).await.expect("succeeds");
    }
    let settings = settings.get();
    assert_eq!(settings.persistence.finalizer, "example.com/finalizer");
    assert_eq!(settings.posting.level, PostingLevel::Error);
}
