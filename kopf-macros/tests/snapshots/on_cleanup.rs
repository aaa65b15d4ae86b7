fn bye(retry: u32) {}
#[doc(hidden)]
#[allow(non_upper_case_globals, clippy::all)]
const _: () = {
    fn __kopf_invoke(
        __kopf_kwargs: ::kopf_runtime::__private::Kwargs,
    ) -> ::kopf_runtime::__private::BoxFuture<
        'static,
        ::kopf_runtime::__private::Outcome,
    > {
        ::kopf_runtime::__private::run_blocking(move || {
            let mut __kopf_storage_0 = match <u32 as ::kopf_runtime::__private::RetryArg<
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
            let __kopf_result = bye(
                <u32 as ::kopf_runtime::__private::RetryArg<
                    '_,
                    ::kopf_runtime::__private::ByValue,
                >>::get(&mut __kopf_storage_0),
            );
            ::kopf_runtime::__private::IntoOutcome::into_outcome(__kopf_result)
        })
    }
    const __KOPF_RECORD: ::kopf_runtime::__private::HandlerRecord = ::kopf_runtime::__private::HandlerRecord {
        kind: ::kopf_runtime::__private::HandlerKind::OnCleanup,
        function: ::kopf_runtime::__private::FunctionRecord {
            path: ::core::concat!(::core::module_path!(), "::", ::core::stringify!(bye)),
            name: ::core::stringify!(bye),
            blocking: true,
            index_params: &[],
            client: false,
            invoke: __kopf_invoke,
        },
        id: ::kopf_runtime::__private::None,
        param: ::kopf_runtime::__private::None,
        resource: ::kopf_runtime::__private::None,
        filters: ::kopf_runtime::__private::FilterRecord::DEFAULT,
        retry: ::kopf_runtime::__private::RetryRecord {
            retries: ::kopf_runtime::__private::Some(1u32),
            backoff: ::kopf_runtime::__private::Some(
                ::kopf_runtime::__private::Duration::new(0u64, 500000000u32),
            ),
            ..::kopf_runtime::__private::RetryRecord::DEFAULT
        },
        changes: ::kopf_runtime::__private::ChangeRecord::DEFAULT,
        task: ::kopf_runtime::__private::TaskRecord::DEFAULT,
        webhook: ::kopf_runtime::__private::WebhookRecord::DEFAULT,
    };
    ::kopf_runtime::__private::inventory::submit!(__KOPF_RECORD);
};
