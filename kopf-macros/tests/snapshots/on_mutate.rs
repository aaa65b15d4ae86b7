async fn mutate(patch: &kopf::Patch, operation: kopf::Operation) -> kopf::Result<()> {
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
            let mut __kopf_storage_0 = match <&kopf::Patch as ::kopf_runtime::__private::PatchArg<
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
            let mut __kopf_storage_1 = match <kopf::Operation as ::kopf_runtime::__private::OperationArg<
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
            let __kopf_result = mutate(
                    <&kopf::Patch as ::kopf_runtime::__private::PatchArg<
                        '_,
                        ::kopf_runtime::__private::ByRef,
                    >>::get(&mut __kopf_storage_0),
                    <kopf::Operation as ::kopf_runtime::__private::OperationArg<
                        '_,
                        ::kopf_runtime::__private::ByValue,
                    >>::get(&mut __kopf_storage_1),
                )
                .await;
            ::kopf_runtime::__private::IntoOutcome::into_outcome(__kopf_result)
        })
    }
    const __KOPF_RECORD: ::kopf_runtime::__private::HandlerRecord = ::kopf_runtime::__private::HandlerRecord {
        kind: ::kopf_runtime::__private::HandlerKind::OnMutate,
        function: ::kopf_runtime::__private::FunctionRecord {
            path: ::core::concat!(
                ::core::module_path!(), "::", ::core::stringify!(mutate)
            ),
            name: ::core::stringify!(mutate),
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
            labels: &[("app", ::kopf_runtime::__private::MetaRecord::Equals("demo"))],
            ..::kopf_runtime::__private::FilterRecord::DEFAULT
        },
        retry: ::kopf_runtime::__private::RetryRecord::DEFAULT,
        changes: ::kopf_runtime::__private::ChangeRecord::DEFAULT,
        task: ::kopf_runtime::__private::TaskRecord::DEFAULT,
        webhook: ::kopf_runtime::__private::WebhookRecord {
            subresource: ::kopf_runtime::__private::Some("status"),
            ignore_failures: true,
            ..::kopf_runtime::__private::WebhookRecord::DEFAULT
        },
    };
    ::kopf_runtime::__private::inventory::submit!(__KOPF_RECORD);
};
