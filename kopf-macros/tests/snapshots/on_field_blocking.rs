fn relabelled(new: Option<String>, by_owner: &kopf::Index) {}
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
            let mut __kopf_storage_0 = match <Option<
                String,
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
            let mut __kopf_storage_1 = match <&kopf::Index as ::kopf_runtime::__private::IndexArg<
                '_,
                ::kopf_runtime::__private::ByRef,
            >>::load(&__kopf_kwargs, "by_owner") {
                ::kopf_runtime::__private::Ok(value) => value,
                ::kopf_runtime::__private::Err(error) => {
                    return ::kopf_runtime::__private::Err(
                        ::kopf_runtime::__private::HandlerError::from(error),
                    );
                }
            };
            let __kopf_result = relabelled(
                <Option<
                    String,
                > as ::kopf_runtime::__private::NewArg<
                    '_,
                    ::kopf_runtime::__private::ByValue,
                >>::get(&mut __kopf_storage_0),
                <&kopf::Index as ::kopf_runtime::__private::IndexArg<
                    '_,
                    ::kopf_runtime::__private::ByRef,
                >>::get(&mut __kopf_storage_1),
            );
            ::kopf_runtime::__private::IntoOutcome::into_outcome(__kopf_result)
        })
    }
    ::kopf_runtime::__private::inventory::submit! {
        ::kopf_runtime::__private::HandlerRecord { kind :
        ::kopf_runtime::__private::HandlerKind::OnField, fn_path :
        ::core::concat!(::core::module_path!(), "::", ::core::stringify!(relabelled)),
        fn_name : ::core::stringify!(relabelled), id : ::kopf_runtime::__private::None,
        resource : ::kopf_runtime::__private::Some(||
        ::kopf_runtime::__private::ResourceRef::of:: < Pod > ()), retries :
        ::kopf_runtime::__private::None, backoff : ::kopf_runtime::__private::None,
        timeout : ::kopf_runtime::__private::None, errors :
        ::kopf_runtime::__private::None, param : ::kopf_runtime::__private::None, labels
        : & [], annotations : & [], when : ::kopf_runtime::__private::Some({ const
        __KOPF_WHEN : fn (& ::kopf_runtime::__private::Kwargs) -> bool = is_ready;
        __KOPF_WHEN }), field : ::kopf_runtime::__private::Some("metadata.labels"), value
        : ::kopf_runtime::__private::None, old :
        ::kopf_runtime::__private::Some(::kopf_runtime::__private::ValueRecord::Absent),
        new :
        ::kopf_runtime::__private::Some(::kopf_runtime::__private::ValueRecord::Equals(||
        ::kopf_runtime::__private::serde_json::json!("x"))), deleted : false, optional :
        false, no_finalizers : false, interval : ::kopf_runtime::__private::None,
        initial_delay : ::kopf_runtime::__private::None, sharp : false, idle :
        ::kopf_runtime::__private::None, cancellation_backoff :
        ::kopf_runtime::__private::None, cancellation_timeout :
        ::kopf_runtime::__private::None, cancellation_polling :
        ::kopf_runtime::__private::None, operations : & [], subresource :
        ::kopf_runtime::__private::None, persistent : false, side_effects : false,
        ignore_failures : false, blocking : true, index_params : & ["by_owner"], invoke :
        __kopf_invoke, }
    }
};
