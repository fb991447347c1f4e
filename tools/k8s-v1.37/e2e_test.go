// The e2e.test of edgekcm's reference runs: upstream's own e2e suites for the
// controllers kube-controller-manager runs, without the cloud providers and
// the suites for other components (which need modules the proxy does not
// serve). Build: tools/k8s/build.sh 1.37 e2e.test (go test -c on this file).
package tools

import (
	"context"
	"flag"
	"os"
	"testing"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	"k8s.io/component-base/logs"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/test/e2e/framework"
	"k8s.io/kubernetes/test/e2e/framework/config"
	"k8s.io/kubernetes/test/e2e/framework/testfiles"
	manifests "k8s.io/kubernetes/test/e2e/testing-manifests"

	// The suites run against both controller managers.
	_ "k8s.io/kubernetes/test/e2e/apimachinery"
	_ "k8s.io/kubernetes/test/e2e/apps"
	_ "k8s.io/kubernetes/test/e2e/auth"
	_ "k8s.io/kubernetes/test/e2e/network"
	_ "k8s.io/kubernetes/test/e2e/node"

	// What the framework needs initialised for debugging, metrics and nodes.
	_ "k8s.io/kubernetes/test/e2e/framework/debug/init"
	_ "k8s.io/kubernetes/test/e2e/framework/node/init"
)

func TestMain(m *testing.M) {
	config.CopyFlags(config.Flags, flag.CommandLine)
	framework.RegisterCommonFlags(flag.CommandLine)
	framework.RegisterClusterFlags(flag.CommandLine)
	flag.Parse()
	testfiles.AddFileSource(manifests.GetE2ETestingManifestsFS())
	framework.AfterReadingAllFlags(&framework.TestContext)
	os.Exit(m.Run())
}

// The suite needs no cluster-wide setup beyond what every spec does itself
// (its namespace, its ServiceAccount): nodes come from the kubelet stand-in.
var _ = ginkgo.SynchronizedBeforeSuite(func(ctx context.Context) []byte {
	return nil
}, func(ctx context.Context, _ []byte) {})

func TestE2E(t *testing.T) {
	logs.InitLogs()
	defer logs.FlushLogs()
	klog.EnableContextualLogging(true)
	gomega.RegisterFailHandler(framework.Fail)
	suite, reporter := framework.CreateGinkgoConfig()
	ginkgo.RunSpecs(t, "edgekcm reference e2e", suite, reporter)
}
