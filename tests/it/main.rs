//! edgekcm's integration tests as one test binary, a module per area; `common` is the harness
//! they share (`sandbox_http` that of the sandbox API tests). The tests run in one process, so
//! none may change process-wide state another one reads: `tests/heap_global.rs`, which makes
//! `edgekcm::heap` the global allocator, is a binary of its own for that reason.

#[macro_use]
mod common;
mod sandbox_http;

mod auth_metrics;
mod certs;
mod cli_files;
mod cli_flags;
mod cli_versions;
mod client_cert_v1;
mod client_tls_transport;
mod code_size;
mod configz;
mod e2e;
mod e2e_attachdetach;
mod e2e_autonomy;
mod e2e_clusterrole;
mod e2e_cronjob;
mod e2e_csr;
mod e2e_csrsigning;
mod e2e_ctbpublisher;
mod e2e_daemonset;
mod e2e_deployment;
mod e2e_devicetainteviction;
mod e2e_disruption;
mod e2e_endpoints;
mod e2e_endpointslice;
mod e2e_endpointslice_metrics;
mod e2e_gc;
mod e2e_gc_monitors;
mod e2e_gcdebug;
mod e2e_hpa;
mod e2e_job;
mod e2e_job_more;
mod e2e_join;
mod e2e_legacytokens;
mod e2e_namespace;
mod e2e_nodeipam;
mod e2e_nodelifecycle;
mod e2e_pcrcleaner;
mod e2e_podgc;
mod e2e_podgroupprotection;
mod e2e_pv;
mod e2e_replicaset;
mod e2e_resourceclaim;
mod e2e_resourcepoolstatusrequest;
mod e2e_resourcequota;
mod e2e_selinuxwarning;
mod e2e_servicecidr;
mod e2e_statefulset;
mod e2e_statefulset_more;
mod e2e_storageversiongc;
mod e2e_svm;
mod e2e_tainteviction;
mod e2e_tokens;
mod e2e_ttl;
mod e2e_vacprotection;
mod e2e_vapstatus;
mod e2e_volumes;
mod handover;
mod layering;
mod logs;
mod notify;
mod reliability;
mod repo;
mod sandbox_api;
mod sandbox_api_more;
mod server_abuse;
mod server_http;
mod startup;
mod two_writers;
