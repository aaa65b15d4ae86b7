async fn resized(
    old: Option<u32>,
    new: Option<u32>,
    diff: &kopf::Diff,
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
            let mut __kopf_storage_0 = match <Option<
                u32,
            > as ::kopf_runtime::__private::OldArg<
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
            let mut __kopf_storage_1 = match <Option<
                u32,
            > as ::kopf_runtime::__private::NewArg<
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
            let mut __kopf_storage_2 = match <&kopf::Diff as ::kopf_runtime::__private::DiffArg<
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
            let __kopf_result = resized(
                    <Option<
                        u32,
                    > as ::kopf_runtime::__private::OldArg<
                        '_,
                        ::kopf_runtime::__private::ByValue,
                    >>::get(&mut __kopf_storage_0),
                    <Option<
                        u32,
                    > as ::kopf_runtime::__private::NewArg<
                        '_,
                        ::kopf_runtime::__private::ByValue,
                    >>::get(&mut __kopf_storage_1),
                    <&kopf::Diff as ::kopf_runtime::__private::DiffArg<
                        '_,
                        ::kopf_runtime::__private::ByRef,
                    >>::get(&mut __kopf_storage_2),
                )
                .await;
            ::kopf_runtime::__private::IntoOutcome::into_outcome(__kopf_result)
        })
    }
    const __KOPF_RECORD: ::kopf_runtime::__private::HandlerRecord = ::kopf_runtime::__private::HandlerRecord {
        kind: ::kopf_runtime::__private::HandlerKind::OnUpdate,
        function: ::kopf_runtime::__private::FunctionRecord {
            path: ::core::concat!(
                ::core::module_path!(), "::", ::core::stringify!(resized)
            ),
            name: ::core::stringify!(resized),
            blocking: false,
            index_params: &[],
            client: false,
            invoke: __kopf_invoke,
        },
        id: ::kopf_runtime::__private::None,
        param: ::kopf_runtime::__private::None,
        resource: ::kopf_runtime::__private::Some(|| ::kopf_runtime::__private::ResourceRef::dynamic(
            "kopf.dev",
            "v1",
            "kopfexamples",
        )),
        filters: ::kopf_runtime::__private::FilterRecord {
            field: ::kopf_runtime::__private::Some("spec.size"),
            old: ::kopf_runtime::__private::Some(
                ::kopf_runtime::__private::ValueRecord::Present,
            ),
            new: ::kopf_runtime::__private::Some(
                ::kopf_runtime::__private::ValueRecord::Equals(|| {
                    ::kopf_runtime::__private::serde_json::json!(5)
                }),
            ),
            ..::kopf_runtime::__private::FilterRecord::DEFAULT
        },
        retry: ::kopf_runtime::__private::RetryRecord {
            timeout: ::kopf_runtime::__private::Some(
                ::kopf_runtime::__private::Duration::new(30u64, 0u32),
            ),
            errors: ::kopf_runtime::__private::Some(
                ::kopf_runtime::__private::ErrorsMode::Permanent,
            ),
            ..::kopf_runtime::__private::RetryRecord::DEFAULT
        },
        changes: ::kopf_runtime::__private::ChangeRecord::DEFAULT,
        task: ::kopf_runtime::__private::TaskRecord::DEFAULT,
        webhook: ::kopf_runtime::__private::WebhookRecord::DEFAULT,
    };
    ::kopf_runtime::__private::inventory::submit!(__KOPF_RECORD);
};
