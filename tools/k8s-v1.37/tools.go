//go:build tools

// Package tools keeps the Kubernetes commands this module builds in go.mod,
// and ginkgo, which runs e2e_test.go's suites in parallel.
package tools

import (
	_ "github.com/onsi/ginkgo/v2/ginkgo"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
)
