async fn expire(meta: &ObjectMeta, client: kube::Client) -> kopf::Result<()> {
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
            let mut __kopf_storage_0 = match <&ObjectMeta as ::kopf_runtime::__private::MetaArg<
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
            let mut __kopf_storage_1 = match <kube::Client as ::kopf_runtime::__private::ClientArg<
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
            let __kopf_result = expire(
                    <&ObjectMeta as ::kopf_runtime::__private::MetaArg<
                        '_,
                        ::kopf_runtime::__private::ByRef,
                    >>::get(&mut __kopf_storage_0),
                    <kube::Client as ::kopf_runtime::__private::ClientArg<
                        '_,
                        ::kopf_runtime::__private::ByValue,
                    >>::get(&mut __kopf_storage_1),
                )
                .await;
            ::kopf_runtime::__private::IntoOutcome::into_outcome(__kopf_result)
        })
    }
    ::kopf_runtime::__private::inventory::submit! {
        ::kopf_runtime::__private::HandlerRecord { kind :
        ::kopf_runtime::__private::HandlerKind::Timer, fn_path :
        ::core::concat!(::core::module_path!(), "::", ::core::stringify!(expire)),
        fn_name : ::core::stringify!(expire), id : ::kopf_runtime::__private::None,
        resource : ::kopf_runtime::__private::Some(||
        ::kopf_runtime::__private::ResourceRef::dynamic("", "v1", "secrets")), retries :
        ::kopf_runtime::__private::None, backoff : ::kopf_runtime::__private::None,
        timeout : ::kopf_runtime::__private::None, errors :
        ::kopf_runtime::__private::None, param : ::kopf_runtime::__private::None, labels
        : & [], annotations : & [("example.com/ttl",
        ::kopf_runtime::__private::MetaRecord::Present)], when :
        ::kopf_runtime::__private::None, field : ::kopf_runtime::__private::None, value :
        ::kopf_runtime::__private::None, old : ::kopf_runtime::__private::None, new :
        ::kopf_runtime::__private::None, deleted : false, optional : false, no_finalizers
        : true, interval :
        ::kopf_runtime::__private::Some(::kopf_runtime::__private::Duration::new(10u64,
        0u32)), initial_delay : ::kopf_runtime::__private::None, sharp : false, idle :
        ::kopf_runtime::__private::None, cancellation_backoff :
        ::kopf_runtime::__private::None, cancellation_timeout :
        ::kopf_runtime::__private::None, cancellation_polling :
        ::kopf_runtime::__private::None, operations : & [], subresource :
        ::kopf_runtime::__private::None, persistent : false, side_effects : false,
        ignore_failures : false, blocking : false, index_params : & [], invoke :
        __kopf_invoke, }
    }
};
