async fn spied(r#type: Option<kopf::EventType>, event: &serde_json::Value) {}
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
                kopf::EventType,
            > as ::kopf_runtime::__private::TypeArg<
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
            let mut __kopf_storage_1 = match <&serde_json::Value as ::kopf_runtime::__private::EventArg<
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
            let __kopf_result = spied(
                    <Option<
                        kopf::EventType,
                    > as ::kopf_runtime::__private::TypeArg<
                        '_,
                        ::kopf_runtime::__private::ByValue,
                    >>::get(&mut __kopf_storage_0),
                    <&serde_json::Value as ::kopf_runtime::__private::EventArg<
                        '_,
                        ::kopf_runtime::__private::ByRef,
                    >>::get(&mut __kopf_storage_1),
                )
                .await;
            ::kopf_runtime::__private::IntoOutcome::into_outcome(__kopf_result)
        })
    }
    const __KOPF_RECORD: ::kopf_runtime::__private::HandlerRecord = ::kopf_runtime::__private::HandlerRecord {
        kind: ::kopf_runtime::__private::HandlerKind::OnEvent,
        function: ::kopf_runtime::__private::FunctionRecord {
            path: ::core::concat!(
                ::core::module_path!(), "::", ::core::stringify!(spied)
            ),
            name: ::core::stringify!(spied),
            blocking: false,
            index_params: &[],
            client: false,
            invoke: __kopf_invoke,
        },
        id: ::kopf_runtime::__private::None,
        param: ::kopf_runtime::__private::Some(|| {
            ::kopf_runtime::__private::serde_json::json!("verbose")
        }),
        resource: ::kopf_runtime::__private::Some(|| ::kopf_runtime::__private::ResourceRef::of::<
            Secret,
        >()),
        filters: ::kopf_runtime::__private::FilterRecord {
            annotations: &[
                ("example.com/watch", ::kopf_runtime::__private::MetaRecord::Present),
            ],
            when: ::kopf_runtime::__private::Some({
                const __KOPF_WHEN: fn(&::kopf_runtime::__private::Kwargs) -> bool = is_big;
                __KOPF_WHEN
            }),
            ..::kopf_runtime::__private::FilterRecord::DEFAULT
        },
        retry: ::kopf_runtime::__private::RetryRecord::DEFAULT,
        changes: ::kopf_runtime::__private::ChangeRecord::DEFAULT,
        task: ::kopf_runtime::__private::TaskRecord::DEFAULT,
        webhook: ::kopf_runtime::__private::WebhookRecord::DEFAULT,
    };
    ::kopf_runtime::__private::inventory::submit!(__KOPF_RECORD);
};
