// appservice-peer: the AppService operator of the product's original design, in Go with
// controller-runtime, used by bench/run.ts as the reference to compare appservice-operator with.
// Flags mirror `deno task start` where both have the setting (names as controller-runtime
// operators use them), so both processes are started with the same values.
package main

import (
	"context"
	"errors"
	"flag"
	"net/http"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

// Version of the peer; part of its User-Agent.
const Version = "0.1.0"

func main() {
	var (
		metricsAddr, probeAddr, watchNamespace, userAgent string
		leaderElect, releaseOnCancel, stripManagedFields  bool
		leaderID, leaderNS                                string
		leaseDuration, renewDeadline, retryPeriod         time.Duration
		syncPeriod, gracefulShutdown, reconcileTimeout    time.Duration
		maxConcurrent, burst                              int
		qps                                               float64
	)
	flag.StringVar(&metricsAddr, "metrics-bind-address", ":8080", "Address of /metrics (0: off).")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "Address of /healthz, /readyz.")
	flag.BoolVar(&leaderElect, "leader-elect", false, "Use a Lease for leader election.")
	flag.StringVar(&leaderID, "leader-election-id", "appservice-peer.apps.our-org.com", "Lease name.")
	flag.StringVar(&leaderNS, "leader-election-namespace", "default", "Lease namespace.")
	flag.DurationVar(&leaseDuration, "leader-elect-lease-duration", 15*time.Second, "Lease duration.")
	flag.DurationVar(&renewDeadline, "leader-elect-renew-deadline", 10*time.Second, "Renew deadline.")
	flag.DurationVar(&retryPeriod, "leader-elect-retry-period", 2*time.Second, "Retry period.")
	flag.BoolVar(&releaseOnCancel, "leader-elect-release-on-cancel", true,
		"Release the Lease on shutdown (as appservice-operator does).")
	flag.IntVar(&maxConcurrent, "max-concurrent-reconciles", 1, "Parallel reconciles.")
	flag.DurationVar(&syncPeriod, "sync-period", 10*time.Hour, "Resync period.")
	flag.DurationVar(&gracefulShutdown, "graceful-shutdown-timeout", 30*time.Second, "Shutdown grace.")
	flag.DurationVar(&reconcileTimeout, "reconcile-timeout", 60*time.Second, "Bound of one reconcile.")
	flag.StringVar(&watchNamespace, "watch-namespace", "", "Watch one namespace only.")
	flag.Float64Var(&qps, "kube-api-qps", 0, "Client-side QPS limit (0: none).")
	flag.IntVar(&burst, "kube-api-burst", 0, "Client-side burst (default 2 x qps).")
	flag.StringVar(&userAgent, "user-agent", "appservice-peer/"+Version+" (controller-runtime)",
		"User-Agent of every request.")
	flag.BoolVar(&stripManagedFields, "strip-managed-fields", true,
		"Drop managedFields from cached objects (appservice-operator does).")
	opts := zap.Options{Development: false}
	opts.BindFlags(flag.CommandLine)
	flag.Parse() // --kubeconfig is registered by controller-runtime's config package
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))
	log := ctrl.Log.WithName("setup")

	cfg := ctrl.GetConfigOrDie()
	cfg.UserAgent = userAgent
	if qps > 0 {
		cfg.QPS = float32(qps)
		cfg.Burst = burst
		if burst == 0 {
			cfg.Burst = int(2 * qps)
		}
	} else {
		cfg.QPS = -1 // no client-side limit (controller-runtime's default; APF applies)
	}

	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = addToScheme(scheme)

	managed := labels.SelectorFromSet(labels.Set{"app.kubernetes.io/managed-by": managedBy})
	cacheOpts := cache.Options{
		SyncPeriod: &syncPeriod,
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Pod{}:     {Label: managed},
			&corev1.Service{}: {Label: managed},
		},
	}
	if stripManagedFields {
		cacheOpts.DefaultTransform = cache.TransformStripManagedFields()
	}
	if watchNamespace != "" {
		cacheOpts.DefaultNamespaces = map[string]cache.Config{watchNamespace: {}}
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        scheme,
		Metrics:                       metricsserver.Options{BindAddress: metricsAddr},
		HealthProbeBindAddress:        probeAddr,
		LeaderElection:                leaderElect,
		LeaderElectionID:              leaderID,
		LeaderElectionNamespace:       leaderNS,
		LeaderElectionReleaseOnCancel: releaseOnCancel,
		LeaseDuration:                 &leaseDuration,
		RenewDeadline:                 &renewDeadline,
		RetryPeriod:                   &retryPeriod,
		GracefulShutdownTimeout:       &gracefulShutdown,
		Cache:                         cacheOpts,
	})
	if err != nil {
		log.Error(err, "unable to create manager")
		os.Exit(1)
	}
	ctx := ctrl.SetupSignalHandler()
	if err := mgr.GetFieldIndexer().IndexField(ctx, &corev1.Pod{}, ownerUIDIndex,
		func(o client.Object) []string {
			for _, r := range o.GetOwnerReferences() {
				if r.Controller != nil && *r.Controller {
					return []string{string(r.UID)}
				}
			}
			return nil
		}); err != nil {
		log.Error(err, "unable to index Pods")
		os.Exit(1)
	}
	// Informers start on every replica, leader or not (a warm standby, as appservice-operator).
	for _, obj := range []client.Object{&AppService{}, &corev1.Pod{}, &corev1.Service{}} {
		if _, err := mgr.GetCache().GetInformer(ctx, obj, cache.BlockUntilSynced(false)); err != nil {
			log.Error(err, "unable to create informer")
			os.Exit(1)
		}
	}

	r := &Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(),
		Recorder: mgr.GetEventRecorder("appservice-peer")}
	// Same event filter as appservice-operator: generation, deletion or finalizers changed.
	primary := predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, n := e.ObjectOld, e.ObjectNew
			return o.GetGeneration() != n.GetGeneration() ||
				(o.GetDeletionTimestamp() == nil) != (n.GetDeletionTimestamp() == nil) ||
				!equalStrings(o.GetFinalizers(), n.GetFinalizers())
		},
		DeleteFunc: func(event.DeleteEvent) bool { return false },
	}
	err = ctrl.NewControllerManagedBy(mgr).
		Named("appservice").
		For(&AppService{}, builder.WithPredicates(primary)).
		Owns(&corev1.Pod{}).
		Owns(&corev1.Service{}).
		WithOptions(controller.Options{MaxConcurrentReconciles: maxConcurrent,
			ReconciliationTimeout: reconcileTimeout}).
		Complete(r)
	if err != nil {
		log.Error(err, "unable to create controller")
		os.Exit(1)
	}
	_ = mgr.AddHealthzCheck("ping", healthz.Ping)
	// Ready once every informer has synced (what appservice-operator's /readyz means).
	_ = mgr.AddReadyzCheck("informers", func(req *http.Request) error {
		c, cancel := context.WithTimeout(req.Context(), 50*time.Millisecond)
		defer cancel()
		if !mgr.GetCache().WaitForCacheSync(c) {
			return errors.New("informers not synced")
		}
		return nil
	})
	log.Info("starting manager", "userAgent", userAgent, "leaderElect", leaderElect)
	if err := mgr.Start(ctx); err != nil {
		log.Error(err, "manager stopped")
		os.Exit(1)
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
