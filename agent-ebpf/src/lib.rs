//! Empty library target: lets `tierscope` list this crate as a build-dependency so cargo rebuilds
//! the agent when the kernel programs change (the aya template's arrangement).
#![no_std]
