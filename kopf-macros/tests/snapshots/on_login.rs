async fn login(started: Option<jiff::Timestamp>) -> kopf::Result<serde_json::Value> {
    Ok(serde_json::json!({ "server" : "https://127.0.0.1:6443" }))
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
            let mut __kopf_storage_0 = match <Option<
                jiff::Timestamp,
            > as ::kopf_runtime::__private::StartedArg<
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
            let __kopf_result = login(
                    <Option<
                        jiff::Timestamp,
                    > as ::kopf_runtime::__private::StartedArg<
                        '_,
                        ::kopf_runtime::__private::ByValue,
                    >>::get(&mut __kopf_storage_0),
                )
                .await;
            ::kopf_runtime::__private::IntoOutcome::into_outcome(__kopf_result)
        })
    }
    const __KOPF_RECORD: ::kopf_runtime::__private::HandlerRecord = ::kopf_runtime::__private::HandlerRecord {
        kind: ::kopf_runtime::__private::HandlerKind::OnLogin,
        function: ::kopf_runtime::__private::FunctionRecord {
            path: ::core::concat!(
                ::core::module_path!(), "::", ::core::stringify!(login)
            ),
            name: ::core::stringify!(login),
            blocking: false,
            index_params: &[],
            client: false,
            invoke: __kopf_invoke,
        },
        id: ::kopf_runtime::__private::None,
        param: ::kopf_runtime::__private::None,
        resource: ::kopf_runtime::__private::None,
        filters: ::kopf_runtime::__private::FilterRecord::DEFAULT,
        retry: ::kopf_runtime::__private::RetryRecord {
            timeout: ::kopf_runtime::__private::Some(
                ::kopf_runtime::__private::Duration::new(60u64, 0u32),
            ),
            ..::kopf_runtime::__private::RetryRecord::DEFAULT
        },
        changes: ::kopf_runtime::__private::ChangeRecord::DEFAULT,
        task: ::kopf_runtime::__private::TaskRecord::DEFAULT,
        webhook: ::kopf_runtime::__private::WebhookRecord::DEFAULT,
    };
    ::kopf_runtime::__private::inventory::submit!(__KOPF_RECORD);
};
