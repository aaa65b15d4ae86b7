async fn monitor(
    name: &str,
    stopped: kopf::Stopped,
    mut live: kopf::LiveBody,
) -> kopf::Result<()> {
    Ok(())
}
#[doc(hidden)]
#[allow(non_upper_case_globals, clippy::all)]
const _: () = {
    fn __kopf_invoke(
        __kopf_kwargs: ::kopf_runtime::__private::Kwargs,
    ) -> ::kopf_runtime::__private::BoxFuture<
        'static,
        ::kopf_runtime::__private::Outcome,
    > {
        ::kopf_runtime::__private::Box::pin(async move {
            let mut __kopf_storage_0 = match <&str as ::kopf_runtime::__private::NameArg<
                '_,
                ::kopf_runtime::__private::ByRef,
            >>::load(&__kopf_kwargs) {
                ::kopf_runtime::__private::Ok(value) => value,
                ::kopf_runtime::__private::Err(error) => {
                    return ::kopf_runtime::__private::Err(
                        ::kopf_runtime::__private::HandlerError::from(error),
                    );
                }
            };
            let mut __kopf_storage_1 = match <kopf::Stopped as ::kopf_runtime::__private::StoppedArg<
                '_,
                ::kopf_runtime::__private::ByValue,
            >>::load(&__kopf_kwargs) {
                ::kopf_runtime::__private::Ok(value) => value,
                ::kopf_runtime::__private::Err(error) => {
                    return ::kopf_runtime::__private::Err(
                        ::kopf_runtime::__private::HandlerError::from(error),
                    );
                }
            };
            let mut __kopf_storage_2 = match <kopf::LiveBody as ::kopf_runtime::__private::LiveArg<
                '_,
                ::kopf_runtime::__private::ByValue,
            >>::load(&__kopf_kwargs) {
                ::kopf_runtime::__private::Ok(value) => value,
                ::kopf_runtime::__private::Err(error) => {
                    return ::kopf_runtime::__private::Err(
                        ::kopf_runtime::__private::HandlerError::from(error),
                    );
                }
            };
            let __kopf_result = monitor(
                    <&str as ::kopf_runtime::__private::NameArg<
                        '_,
                        ::kopf_runtime::__private::ByRef,
                    >>::get(&mut __kopf_storage_0),
                    <kopf::Stopped as ::kopf_runtime::__private::StoppedArg<
                        '_,
                        ::kopf_runtime::__private::ByValue,
                    >>::get(&mut __kopf_storage_1),
                    <kopf::LiveBody as ::kopf_runtime::__private::LiveArg<
                        '_,
                        ::kopf_runtime::__private::ByValue,
                    >>::get(&mut __kopf_storage_2),
                )
                .await;
            ::kopf_runtime::__private::IntoOutcome::into_outcome(__kopf_result)
        })
    }
    const __KOPF_RECORD: ::kopf_runtime::__private::HandlerRecord = ::kopf_runtime::__private::HandlerRecord {
        kind: ::kopf_runtime::__private::HandlerKind::Daemon,
        function: ::kopf_runtime::__private::FunctionRecord {
            path: ::core::concat!(
                ::core::module_path!(), "::", ::core::stringify!(monitor)
            ),
            name: ::core::stringify!(monitor),
            blocking: false,
            index_params: &[],
            client: false,
            invoke: __kopf_invoke,
        },
        id: ::kopf_runtime::__private::None,
        param: ::kopf_runtime::__private::None,
        resource: ::kopf_runtime::__private::Some(|| ::kopf_runtime::__private::ResourceRef::of::<
            Pod,
        >()),
        filters: ::kopf_runtime::__private::FilterRecord::DEFAULT,
        retry: ::kopf_runtime::__private::RetryRecord::DEFAULT,
        changes: ::kopf_runtime::__private::ChangeRecord::DEFAULT,
        task: ::kopf_runtime::__private::TaskRecord {
            initial_delay: ::kopf_runtime::__private::Some(
                ::kopf_runtime::__private::Duration::new(3u64, 0u32),
            ),
            cancellation_backoff: ::kopf_runtime::__private::Some(
                ::kopf_runtime::__private::Duration::new(1u64, 0u32),
            ),
            cancellation_timeout: ::kopf_runtime::__private::Some(
                ::kopf_runtime::__private::Duration::new(5u64, 0u32),
            ),
            cancellation_polling: ::kopf_runtime::__private::Some(
                ::kopf_runtime::__private::Duration::new(0u64, 250000000u32),
            ),
            ..::kopf_runtime::__private::TaskRecord::DEFAULT
        },
        webhook: ::kopf_runtime::__private::WebhookRecord::DEFAULT,
    };
    ::kopf_runtime::__private::inventory::submit!(__KOPF_RECORD);
};
