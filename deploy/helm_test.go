package deploy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"
)

const (
	chartDir    = "helm/sylk"
	releaseName = "t"
	namespace   = "sylk"
)

// helmBinary finds the helm command on PATH, where `make tools` puts it
// (.tools/bin at the repository's root) or where `go install` puts it.
func helmBinary(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("helm"); err == nil {
		return p
	}
	dirs := []string{filepath.Join("..", ".tools", "bin")}
	if gopath, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		for _, dir := range filepath.SplitList(strings.TrimSpace(string(gopath))) {
			dirs = append(dirs, filepath.Join(dir, "bin"))
		}
	}
	for _, dir := range dirs {
		p := filepath.Join(dir, "helm")
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			abs, err := filepath.Abs(p)
			if err != nil {
				t.Fatal(err)
			}
			return abs
		}
	}
	t.Fatal("helm not found on PATH, in .tools/bin nor in $(go env GOPATH)/bin: run `make tools` to install it")
	return ""
}

// Keys the chart requires unless they are in existing Secrets: it generates
// none, so that every render gives the same output.
var (
	testBootstrapKey = "sylk_" + strings.Repeat("b", 40)
	testInternalKey  = strings.Repeat("i", 48)
	testKeys         = []string{"--set", "auth.bootstrapKey=" + testBootstrapKey, "--set", "internal.key=" + testInternalKey}
)

// templateChart runs helm template on the chart with the test keys and args
// (whose --set come later, so they win).
func templateChart(t *testing.T, args ...string) (string, error) {
	t.Helper()
	base := []string{"template", releaseName, chartDir, "--namespace", namespace}
	return runHelm(t, slices.Concat(base, testKeys, args)...)
}

func runHelm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(helmBinary(t), args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// Keep helm from reading or writing the user's configuration.
	home := t.TempDir()
	cmd.Env = append(os.Environ(),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"),
	)
	err := cmd.Run()
	if err != nil {
		return stdout.String(), fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// chartCase is one set of values the chart is checked with.
type chartCase struct {
	name string
	args []string // extra helm arguments (-f, --set)

	wantImagePrefix  string
	wantTag          string
	wantStoreSecrets map[string]corev1.SecretKeySelector // env name -> secret and key
	wantAuthSecret   corev1.SecretKeySelector
	wantChartSecret  bool
	wantNetPol       bool
	wantOtel         string
	wantReplicas     map[string]int32
}

func chartCases() []chartCase {
	sel := func(name, key string) corev1.SecretKeySelector {
		return corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key}
	}
	own := releaseName + "-sylk"
	return []chartCase{
		{
			name:            "defaults",
			args:            testKeys,
			wantImagePrefix: "sylk/",
			wantTag:         "0.1.0",
			wantStoreSecrets: map[string]corev1.SecretKeySelector{
				"SYLK_POSTGRES_DSN": sel(own, "postgres-dsn"),
				"SYLK_REDIS_URL":    sel(own, "redis-url"),
				"SYLK_NATS_URL":     sel(own, "nats-url"),
				"SYLK_INTERNAL_KEY": sel(own, "internal-key"),
			},
			wantAuthSecret:  sel(own, "bootstrap-key"),
			wantChartSecret: true,
			wantReplicas:    map[string]int32{},
		},
		{
			name:            "external services",
			args:            []string{"-f", filepath.Join(chartDir, "ci", "external-values.yaml")},
			wantImagePrefix: "registry.example.com/sylk/",
			wantTag:         "1.2.3",
			wantStoreSecrets: map[string]corev1.SecretKeySelector{
				"SYLK_POSTGRES_DSN": sel("sylk-stores", "dsn"),
				"SYLK_REDIS_URL":    sel("sylk-stores", "redis"),
				"SYLK_NATS_URL":     sel("sylk-stores", "nats"),
				"SYLK_INTERNAL_KEY": sel("sylk-internal", "key"),
			},
			wantAuthSecret: sel("sylk-auth", "key"),
			wantNetPol:     true,
			wantOtel:       "otel-collector.observability:4317",
			wantReplicas:   map[string]int32{"guide": 2, "librarian": 2, "worker": 3, "gateway": 2},
		},
	}
}

func TestHelmLint(t *testing.T) {
	t.Parallel()
	for _, tc := range chartCases() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			out, err := runHelm(t, append([]string{"lint", "--strict", chartDir}, tc.args...)...)
			require.NoError(t, err)
			require.Contains(t, out, "0 chart(s) failed")
		})
	}
}

var docSeparator = regexp.MustCompile(`(?m)^---[ \t]*$`)

// decodeStrict decodes one manifest into its Kubernetes API type, failing on
// unknown or duplicate fields and on kinds the API does not have.
func decodeStrict(doc []byte) (runtime.Object, error) {
	codecs := serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict)
	obj, _, err := codecs.UniversalDeserializer().Decode(doc, nil, nil)
	return obj, err
}

// isBlank reports whether a YAML document holds nothing but comments.
func isBlank(doc string) bool {
	for line := range strings.Lines(doc) {
		line = strings.TrimSpace(line)
		if line != "" && !strings.HasPrefix(line, "#") {
			return false
		}
	}
	return true
}

// rendered is the chart's output, decoded and indexed by kind and name.
type rendered struct {
	deployments map[string]*appsv1.Deployment
	services    map[string]*corev1.Service
	configMaps  map[string]*corev1.ConfigMap
	secrets     map[string]*corev1.Secret
	jobs        map[string]*batchv1.Job
	netpols     map[string]*networkingv1.NetworkPolicy
	accounts    map[string]*corev1.ServiceAccount
	claims      map[string]*corev1.PersistentVolumeClaim
	ingresses   map[string]*networkingv1.Ingress
	pdbs        map[string]*policyv1.PodDisruptionBudget
	hpas        map[string]*autoscalingv2.HorizontalPodAutoscaler
	monitors    map[string]*serviceMonitor
}

// serviceMonitor holds the fields of the Prometheus operator's
// ServiceMonitor (monitoring.coreos.com/v1) the chart sets; it is decoded
// strictly, so a field the chart renders that is not listed here fails.
type serviceMonitor struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
	Spec       struct {
		Selector          metav1.LabelSelector `json:"selector"`
		NamespaceSelector struct {
			MatchNames []string `json:"matchNames"`
		} `json:"namespaceSelector"`
		TargetLabels []string `json:"targetLabels"`
		Endpoints    []struct {
			Port          string `json:"port"`
			Path          string `json:"path"`
			Scheme        string `json:"scheme"`
			Interval      string `json:"interval"`
			ScrapeTimeout string `json:"scrapeTimeout,omitempty"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// GetNamespace returns the ServiceMonitor's namespace.
func (m *serviceMonitor) GetNamespace() string { return m.Metadata.Namespace }

// decodeManifest decodes one rendered manifest: a ServiceMonitor into
// serviceMonitor, anything else through decodeStrict.
func decodeManifest(doc []byte) (any, error) {
	var head struct {
		Kind string `json:"kind"`
	}
	if err := yaml.Unmarshal(doc, &head); err != nil {
		return nil, err
	}
	if head.Kind != "ServiceMonitor" {
		return decodeStrict(doc)
	}
	var m serviceMonitor
	if err := yaml.UnmarshalStrict(doc, &m); err != nil {
		return nil, err
	}
	if m.APIVersion != "monitoring.coreos.com/v1" {
		return nil, fmt.Errorf("ServiceMonitor of apiVersion %q", m.APIVersion)
	}
	return &m, nil
}

// renderChart renders the chart with the test keys and args, and decodes it.
func renderChart(t *testing.T, args ...string) rendered {
	t.Helper()
	out, err := templateChart(t, args...)
	require.NoError(t, err)
	return decodeChart(t, out)
}

// decodeChart decodes helm template's output strictly, by kind and name.
func decodeChart(t *testing.T, out string) rendered {
	t.Helper()
	r := rendered{
		deployments: map[string]*appsv1.Deployment{},
		services:    map[string]*corev1.Service{},
		configMaps:  map[string]*corev1.ConfigMap{},
		secrets:     map[string]*corev1.Secret{},
		jobs:        map[string]*batchv1.Job{},
		netpols:     map[string]*networkingv1.NetworkPolicy{},
		accounts:    map[string]*corev1.ServiceAccount{},
		claims:      map[string]*corev1.PersistentVolumeClaim{},
		ingresses:   map[string]*networkingv1.Ingress{},
		pdbs:        map[string]*policyv1.PodDisruptionBudget{},
		hpas:        map[string]*autoscalingv2.HorizontalPodAutoscaler{},
		monitors:    map[string]*serviceMonitor{},
	}
	put := func(m any, name string, obj any) {
		switch m := m.(type) {
		case map[string]*appsv1.Deployment:
			require.NotContains(t, m, name, "two Deployments named %s", name)
			m[name] = obj.(*appsv1.Deployment)
		case map[string]*corev1.Service:
			require.NotContains(t, m, name, "two Services named %s", name)
			m[name] = obj.(*corev1.Service)
		case map[string]*corev1.ConfigMap:
			require.NotContains(t, m, name, "two ConfigMaps named %s", name)
			m[name] = obj.(*corev1.ConfigMap)
		case map[string]*corev1.Secret:
			require.NotContains(t, m, name, "two Secrets named %s", name)
			m[name] = obj.(*corev1.Secret)
		case map[string]*batchv1.Job:
			require.NotContains(t, m, name, "two Jobs named %s", name)
			m[name] = obj.(*batchv1.Job)
		case map[string]*networkingv1.NetworkPolicy:
			require.NotContains(t, m, name, "two NetworkPolicies named %s", name)
			m[name] = obj.(*networkingv1.NetworkPolicy)
		case map[string]*corev1.ServiceAccount:
			require.NotContains(t, m, name, "two ServiceAccounts named %s", name)
			m[name] = obj.(*corev1.ServiceAccount)
		case map[string]*corev1.PersistentVolumeClaim:
			require.NotContains(t, m, name, "two PersistentVolumeClaims named %s", name)
			m[name] = obj.(*corev1.PersistentVolumeClaim)
		case map[string]*networkingv1.Ingress:
			require.NotContains(t, m, name, "two Ingresses named %s", name)
			m[name] = obj.(*networkingv1.Ingress)
		case map[string]*policyv1.PodDisruptionBudget:
			require.NotContains(t, m, name, "two PodDisruptionBudgets named %s", name)
			m[name] = obj.(*policyv1.PodDisruptionBudget)
		case map[string]*autoscalingv2.HorizontalPodAutoscaler:
			require.NotContains(t, m, name, "two HorizontalPodAutoscalers named %s", name)
			m[name] = obj.(*autoscalingv2.HorizontalPodAutoscaler)
		case map[string]*serviceMonitor:
			require.NotContains(t, m, name, "two ServiceMonitors named %s", name)
			m[name] = obj.(*serviceMonitor)
		}
	}
	n := 0
	for _, doc := range docSeparator.Split(out, -1) {
		if isBlank(doc) {
			continue
		}
		n++
		obj, err := decodeManifest([]byte(doc))
		require.NoError(t, err, "manifest does not decode strictly:\n%s", doc)
		switch o := obj.(type) {
		case *appsv1.Deployment:
			put(r.deployments, o.Name, o)
		case *corev1.Service:
			put(r.services, o.Name, o)
		case *corev1.ConfigMap:
			put(r.configMaps, o.Name, o)
		case *corev1.Secret:
			put(r.secrets, o.Name, o)
		case *batchv1.Job:
			put(r.jobs, o.Name, o)
		case *networkingv1.NetworkPolicy:
			put(r.netpols, o.Name, o)
		case *corev1.ServiceAccount:
			put(r.accounts, o.Name, o)
		case *corev1.PersistentVolumeClaim:
			put(r.claims, o.Name, o)
		case *networkingv1.Ingress:
			put(r.ingresses, o.Name, o)
		case *policyv1.PodDisruptionBudget:
			put(r.pdbs, o.Name, o)
		case *autoscalingv2.HorizontalPodAutoscaler:
			put(r.hpas, o.Name, o)
		case *serviceMonitor:
			put(r.monitors, o.Metadata.Name, o)
		default:
			t.Fatalf("unexpected kind %T in the chart:\n%s", obj, doc)
		}
		meta, ok := obj.(interface{ GetNamespace() string })
		require.True(t, ok)
		require.Equal(t, namespace, meta.GetNamespace(), "every object must be in the release namespace:\n%s", doc)
	}
	require.NotZero(t, n, "helm template rendered nothing")
	return r
}

func objectName(service string) string { return releaseName + "-sylk-" + service }

func TestDecodeStrictRejectsUnknownFields(t *testing.T) {
	t.Parallel()
	_, err := decodeStrict([]byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\ndata: {}\nbogus: 1\n"))
	require.ErrorContains(t, err, "bogus")
	_, err = decodeStrict([]byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n  name: y\n"))
	require.Error(t, err, "duplicate fields must be rejected")
	_, err = decodeStrict([]byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n"))
	require.NoError(t, err)
}

func TestHelmTemplate(t *testing.T) {
	t.Parallel()
	for _, tc := range chartCases() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := renderChart(t, tc.args...)
			require.Len(t, r.deployments, len(services))
			require.Len(t, r.services, len(services))
			require.Len(t, r.configMaps, 1)
			cm := r.configMaps[releaseName+"-sylk"]
			require.NotNil(t, cm, "the shared ConfigMap")

			for _, name := range services {
				t.Run(name, func(t *testing.T) {
					d := r.deployments[objectName(name)]
					require.NotNil(t, d, "no Deployment for %s", name)
					checkDeployment(t, tc, r, name, d)
					checkService(t, name, d, r.services[objectName(name)])
					if tc.wantNetPol {
						np := r.netpols[objectName(name)]
						require.NotNil(t, np, "no NetworkPolicy for %s", name)
						require.Equal(t, d.Spec.Selector.MatchLabels, np.Spec.PodSelector.MatchLabels)
						require.NotEmpty(t, np.Spec.Ingress)
						checkEgress(t, name, np)
						checkGRPCIngress(t, r, name, np)
					}
				})
			}
			if !tc.wantNetPol {
				require.Empty(t, r.netpols)
			}

			t.Run("configmap", func(t *testing.T) {
				require.Equal(t, ":9090", cm.Data["SYLK_GRPC_LISTEN_ADDRESS"])
				require.Equal(t, ":9091", cm.Data["SYLK_HTTP_LISTEN_ADDRESS"])
				require.Equal(t, "5s", cm.Data["SYLK_SHUTDOWN_DELAY"])
				require.Equal(t, tc.wantOtel, cm.Data["SYLK_OTEL_ENDPOINT"])
				for key, v := range cm.Data {
					require.True(t, strings.HasPrefix(key, "SYLK_"), "ConfigMap key %s", key)
					require.NotContains(t, v, "://", "%s: URLs may hold credentials: keep them in Secrets", key)
				}
				for _, key := range []string{"SYLK_POSTGRES_DSN", "SYLK_REDIS_URL", "SYLK_NATS_URL", "SYLK_AUTH_BOOTSTRAP_KEY", "SYLK_INTERNAL_KEY"} {
					require.NotContains(t, cm.Data, key, "credentials belong in Secrets")
				}
				// Every peer address is a rendered Service on its gRPC port.
				for _, peer := range peerServices {
					addr := cm.Data["SYLK_PEER_"+strings.ToUpper(peer)]
					host, port, ok := strings.Cut(addr, ":")
					require.True(t, ok, "SYLK_PEER_%s=%q", strings.ToUpper(peer), addr)
					require.Equal(t, objectName(peer), host)
					svc := r.services[host]
					require.NotNil(t, svc, "peer %s: no Service %s", peer, host)
					require.True(t, slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool {
						return strconv.Itoa(int(p.Port)) == port && p.Name == "grpc"
					}), "peer %s: Service %s has no gRPC port %s", peer, host, port)
				}
			})

			t.Run("secrets", func(t *testing.T) {
				own := r.secrets[releaseName+"-sylk"]
				if !tc.wantChartSecret {
					require.Nil(t, own, "every credential comes from an existing Secret: the chart makes none")
					return
				}
				require.NotNil(t, own)
				key := string(own.Data["bootstrap-key"])
				require.Equal(t, testBootstrapKey, key, "the bootstrap key given")
				require.Equal(t, testInternalKey, string(own.Data["internal-key"]), "the internal key given")
			})

			t.Run("migrations", func(t *testing.T) {
				checkMigrationJob(t, tc, r)
			})
		})
	}
}

func requireSecretRef(t *testing.T, tc chartCase, r rendered, env []corev1.EnvVar, name string, want corev1.SecretKeySelector) {
	t.Helper()
	i := slices.IndexFunc(env, func(e corev1.EnvVar) bool { return e.Name == name })
	require.GreaterOrEqual(t, i, 0, "no %s in the environment", name)
	e := env[i]
	require.Empty(t, e.Value, "%s must come from a Secret, not a plain value", name)
	require.NotNil(t, e.ValueFrom, name)
	require.NotNil(t, e.ValueFrom.SecretKeyRef, "%s must be a secretKeyRef", name)
	ref := e.ValueFrom.SecretKeyRef
	require.Equal(t, want.Name, ref.Name, name)
	require.Equal(t, want.Key, ref.Key, name)
	if s := r.secrets[ref.Name]; s != nil {
		require.Contains(t, s.Data, ref.Key, "%s: Secret %s has no key %s", name, ref.Name, ref.Key)
	} else {
		require.False(t, tc.wantChartSecret && ref.Name == releaseName+"-sylk", "%s: the chart's Secret is missing", name)
	}
}

func checkSecurity(t *testing.T, what string, pod corev1.PodSpec) {
	t.Helper()
	psc := pod.SecurityContext
	require.NotNil(t, psc, "%s: pod securityContext", what)
	require.NotNil(t, psc.RunAsNonRoot, what)
	require.True(t, *psc.RunAsNonRoot, "%s: runAsNonRoot", what)
	require.NotNil(t, psc.RunAsUser, what)
	require.EqualValues(t, nonRootUID, *psc.RunAsUser, what)
	require.NotNil(t, psc.SeccompProfile, what)
	require.Equal(t, corev1.SeccompProfileTypeRuntimeDefault, psc.SeccompProfile.Type, what)
	require.NotNil(t, pod.AutomountServiceAccountToken, what)
	require.False(t, *pod.AutomountServiceAccountToken, "%s: no API token is needed", what)
	require.Len(t, pod.Containers, 1, what)
	for _, c := range append(slices.Clone(pod.InitContainers), pod.Containers...) {
		sc := c.SecurityContext
		require.NotNil(t, sc, "%s/%s: securityContext", what, c.Name)
		require.NotNil(t, sc.ReadOnlyRootFilesystem)
		require.True(t, *sc.ReadOnlyRootFilesystem, "%s/%s: readOnlyRootFilesystem", what, c.Name)
		require.NotNil(t, sc.AllowPrivilegeEscalation)
		require.False(t, *sc.AllowPrivilegeEscalation, "%s/%s: allowPrivilegeEscalation", what, c.Name)
		require.NotNil(t, sc.RunAsNonRoot)
		require.True(t, *sc.RunAsNonRoot, "%s/%s: runAsNonRoot", what, c.Name)
		require.True(t, sc.Privileged == nil || !*sc.Privileged, "%s/%s: privileged", what, c.Name)
		require.NotNil(t, sc.Capabilities)
		require.Contains(t, sc.Capabilities.Drop, corev1.Capability("ALL"), "%s/%s: drop ALL capabilities", what, c.Name)
		require.Empty(t, sc.Capabilities.Add, "%s/%s", what, c.Name)
		require.NotNil(t, sc.SeccompProfile)
		require.Equal(t, corev1.SeccompProfileTypeRuntimeDefault, sc.SeccompProfile.Type)

		require.False(t, c.Resources.Requests.Cpu().IsZero(), "%s/%s: cpu request", what, c.Name)
		require.False(t, c.Resources.Requests.Memory().IsZero(), "%s/%s: memory request", what, c.Name)
		require.False(t, c.Resources.Limits.Memory().IsZero(), "%s/%s: memory limit", what, c.Name)

		// The root filesystem is read-only: /tmp must be a writable volume.
		mounts := map[string]string{}
		for _, m := range c.VolumeMounts {
			mounts[m.MountPath] = m.Name
			require.True(t, slices.ContainsFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name }),
				"%s/%s: mount of unknown volume %s", what, c.Name, m.Name)
		}
		tmp, ok := mounts["/tmp"]
		require.True(t, ok, "%s/%s: /tmp must be mounted", what, c.Name)
		requireEmptyDir(t, pod, tmp)
	}
}

func requireEmptyDir(t *testing.T, pod corev1.PodSpec, volume string) {
	t.Helper()
	i := slices.IndexFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == volume })
	require.GreaterOrEqual(t, i, 0, "no volume %s", volume)
	ed := pod.Volumes[i].EmptyDir
	require.NotNil(t, ed, "volume %s must be an emptyDir", volume)
	require.NotNil(t, ed.SizeLimit, "volume %s needs a size limit", volume)
}

// portNumber resolves a probe or target port against a container's ports.
func portNumber(t *testing.T, c corev1.Container, p intstr.IntOrString) int32 {
	t.Helper()
	if p.Type == intstr.Int {
		return p.IntVal
	}
	for _, cp := range c.Ports {
		if cp.Name == p.StrVal {
			return cp.ContainerPort
		}
	}
	t.Fatalf("container %s has no port named %q", c.Name, p.StrVal)
	return 0
}

func checkDeployment(t *testing.T, tc chartCase, r rendered, name string, d *appsv1.Deployment) {
	t.Helper()
	pod := d.Spec.Template.Spec
	checkSecurity(t, name, pod)
	c := pod.Containers[0]

	require.Equal(t, tc.wantImagePrefix+"sylk-"+name+":"+tc.wantTag, c.Image)
	require.Equal(t, podCommand(t, name), c.Command)
	want := int32(1)
	if n, ok := tc.wantReplicas[name]; ok {
		want = n
	}
	require.NotNil(t, d.Spec.Replicas)
	require.Equal(t, want, *d.Spec.Replicas)
	require.Equal(t, name, d.Spec.Template.Labels["app.kubernetes.io/component"])
	for k, v := range d.Spec.Selector.MatchLabels {
		require.Equal(t, v, d.Spec.Template.Labels[k], "selector label %s", k)
	}

	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	require.Equal(t, int32(metricsPort), ports["metrics"])

	for probeName, p := range map[string]*corev1.Probe{"startup": c.StartupProbe, "readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		require.NotNil(t, p, "%s probe", probeName)
		if name == "gateway" {
			// Ready only while it takes requests: /readyz answers 503 from
			// the start of a shutdown (and without its key store).
			path := "/healthz"
			if probeName == "readiness" {
				path = "/readyz"
			}
			require.NotNil(t, p.HTTPGet, "%s probe: GET %s", probeName, path)
			require.Equal(t, path, p.HTTPGet.Path, probeName)
			require.Equal(t, int32(gatewayPort), portNumber(t, c, p.HTTPGet.Port))
		} else {
			require.NotNil(t, p.GRPC, "%s probe: grpc.health.v1", probeName)
			require.Equal(t, int32(grpcPort), p.GRPC.Port)
		}
	}
	if name == "gateway" {
		require.Equal(t, int32(gatewayPort), ports["http"])
	} else {
		require.Equal(t, int32(grpcPort), ports["grpc"])
	}

	require.Len(t, c.EnvFrom, 1)
	require.NotNil(t, c.EnvFrom[0].ConfigMapRef)
	require.Contains(t, r.configMaps, c.EnvFrom[0].ConfigMapRef.Name, "envFrom a ConfigMap the chart renders")
	for env, sel := range tc.wantStoreSecrets {
		requireSecretRef(t, tc, r, c.Env, env, sel)
	}

	switch name {
	case "gateway":
		requireSecretRef(t, tc, r, c.Env, "SYLK_AUTH_BOOTSTRAP_KEY", tc.wantAuthSecret)
		requireEnvValue(t, c.Env, "SYLK_GATEWAY_LISTEN_ADDRESS", ":"+strconv.Itoa(gatewayPort))
	case "worker":
		require.NotEmpty(t, envValue(c.Env, "SYLK_WORKER_ROLES"))
		requireMountedEmptyDir(t, pod, c, envValue(c.Env, "SYLK_WORKER_WORKSPACE_ROOT"))
		// The tenants' Go caches need a writable place on a read-only root.
		require.True(t, strings.HasPrefix(envValue(c.Env, "SYLK_WORKER_CACHE_ROOT"), envValue(c.Env, "SYLK_WORKER_WORKSPACE_ROOT")+"/"))
	}
	checkRepositories(t, name, pod, c, repositoriesPath) // repositories_test.go
	checkGracePeriod(t, r, name, d)

	if !tc.wantChartSecret {
		return
	}
	// A change to the chart's Secret or ConfigMap must roll the pods.
	require.NotEmpty(t, d.Spec.Template.Annotations["checksum/config"])
	require.NotEmpty(t, d.Spec.Template.Annotations["checksum/secret"])
}

// checkGracePeriod: the kubelet kills no pod before it has drained. Every
// pod's grace period outlasts its preStop sleep and shutdown delay; the
// worker's also outlasts its drain timeout, in which running tasks finish.
func checkGracePeriod(t *testing.T, r rendered, name string, d *appsv1.Deployment) {
	t.Helper()
	delay, err := time.ParseDuration(r.configMaps[releaseName+"-sylk"].Data["SYLK_SHUTDOWN_DELAY"])
	require.NoError(t, err)
	before := time.Duration(preStopSleep(d))*time.Second + delay
	if name == "worker" {
		drain, err := time.ParseDuration(envValue(d.Spec.Template.Spec.Containers[0].Env, "SYLK_WORKER_DRAIN_TIMEOUT"))
		require.NoError(t, err, "the worker's drain timeout")
		require.GreaterOrEqual(t, drain, time.Minute, "agent tasks run for minutes")
		before += drain
	}
	grace := time.Duration(graceSeconds(t, d)) * time.Second
	require.Greater(t, grace, before, "%s: terminationGracePeriodSeconds %s, but it stops serving only after %s", name, grace, before)
}

// podCommand is the command a service's container must run. A pod's command
// replaces the image's ENTRYPOINT, init included. The librarian's and the
// orchestrator's images (the Dockerfile's stages of those names) run git, whose
// helpers outlive a git killed on a timeout, and neither service reaps them:
// they keep the stage's init (tini) as process 1. The worker reaps what its commands leave behind
// itself (it adopts them as a child subreaper), and runs as process 1: an
// init in front of it would be a dumpable process of the same user as task
// commands holding the container's whole environment, store credentials
// included, in /proc/1/environ.
func podCommand(t *testing.T, service string) []string {
	t.Helper()
	bin := "/usr/local/bin/sylk-" + service
	if service != "librarian" && service != "orchestrator" {
		return []string{bin}
	}
	m, _, _ := loadDockerfile(t)
	i := slices.IndexFunc(m.stages, func(s stage) bool { return s.name == service })
	require.GreaterOrEqual(t, i, 0, "the Dockerfile's %s stage", service)
	entry := m.stages[i].all("ENTRYPOINT")
	require.Len(t, entry, 1)
	var argv []string
	require.NoError(t, json.Unmarshal([]byte(entry[0].args), &argv))
	require.Greater(t, len(argv), 1, "the %s stage's ENTRYPOINT starts an init", service)
	require.Equal(t, "/usr/local/bin/sylk-entrypoint", argv[len(argv)-1], "the ENTRYPOINT ends with the image's binary")
	return append(slices.Clone(argv[:len(argv)-1]), bin)
}

// requireMountedEmptyDir checks that dir is the mount of an emptyDir in c.
func requireMountedEmptyDir(t *testing.T, pod corev1.PodSpec, c corev1.Container, dir string) {
	t.Helper()
	require.NotEmpty(t, dir)
	i := slices.IndexFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == dir })
	require.GreaterOrEqual(t, i, 0, "%q must be a volume", dir)
	requireEmptyDir(t, pod, c.VolumeMounts[i].Name)
}

func envValue(env []corev1.EnvVar, name string) string {
	for _, e := range env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

func requireEnvValue(t *testing.T, env []corev1.EnvVar, name, want string) {
	t.Helper()
	require.Equal(t, want, envValue(env, name), name)
}

func checkService(t *testing.T, name string, d *appsv1.Deployment, s *corev1.Service) {
	t.Helper()
	require.NotNil(t, s, "no Service for %s", name)
	require.Equal(t, d.Spec.Selector.MatchLabels, s.Spec.Selector, "the Service selects exactly the Deployment's pods")
	c := d.Spec.Template.Spec.Containers[0]
	got := map[string]int32{}
	for _, p := range s.Spec.Ports {
		got[p.Name] = p.Port
		require.Equal(t, p.Port, portNumber(t, c, p.TargetPort), "port %s targets the container port of the same number", p.Name)
	}
	if name == "gateway" {
		require.Equal(t, map[string]int32{"http": gatewayPort, "metrics": metricsPort}, got)
	} else {
		require.Equal(t, map[string]int32{"grpc": grpcPort, "metrics": metricsPort}, got)
		require.Equal(t, corev1.ClusterIPNone, s.Spec.ClusterIP, "%s: headless, so gRPC clients balance over every pod", name)
	}
}

func hookWeight(t *testing.T, annotations map[string]string) int {
	t.Helper()
	w, ok := annotations["helm.sh/hook-weight"]
	if !ok {
		return 0
	}
	n, err := strconv.Atoi(w)
	require.NoError(t, err, "helm.sh/hook-weight %q", w)
	return n
}

func requireHook(t *testing.T, what string, annotations map[string]string) {
	t.Helper()
	hooks := strings.Split(annotations["helm.sh/hook"], ",")
	require.Contains(t, hooks, "pre-install", "%s: helm.sh/hook", what)
	require.Contains(t, hooks, "pre-upgrade", "%s: helm.sh/hook", what)
	require.NotEmpty(t, annotations["helm.sh/hook-delete-policy"], "%s: helm.sh/hook-delete-policy", what)
	require.Contains(t, strings.Split(annotations["helm.sh/hook-delete-policy"], ","), "before-hook-creation", what)
}

func checkMigrationJob(t *testing.T, tc chartCase, r rendered) {
	t.Helper()
	require.Len(t, r.jobs, 1)
	job := r.jobs[releaseName+"-sylk-migrate"]
	require.NotNil(t, job, "the migration Job")
	requireHook(t, "migration Job", job.Annotations)

	pod := job.Spec.Template.Spec
	require.Equal(t, corev1.RestartPolicyNever, pod.RestartPolicy)
	checkSecurity(t, "migrate", pod)
	c := pod.Containers[0]
	require.Equal(t, tc.wantImagePrefix+"sylk:"+tc.wantTag, c.Image)
	require.Equal(t, []string{"/usr/local/bin/sylk"}, c.Command)
	require.Equal(t, []string{"migrate"}, c.Args)

	// Hooks run before the release's objects exist: the Job's DSN must come
	// from an existing Secret or from a hook Secret created before the Job.
	i := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "SYLK_POSTGRES_DSN" })
	require.GreaterOrEqual(t, i, 0)
	require.NotNil(t, c.Env[i].ValueFrom)
	ref := c.Env[i].ValueFrom.SecretKeyRef
	require.NotNil(t, ref, "the DSN must come from a Secret")
	if !tc.wantChartSecret {
		want := tc.wantStoreSecrets["SYLK_POSTGRES_DSN"]
		require.Equal(t, want.Name, ref.Name)
		require.Equal(t, want.Key, ref.Key)
		return
	}
	s := r.secrets[ref.Name]
	require.NotNil(t, s, "the Job's Secret %s must be rendered", ref.Name)
	require.Contains(t, s.Data, ref.Key)
	requireHook(t, "migration Secret", s.Annotations)
	require.Less(t, hookWeight(t, s.Annotations), hookWeight(t, job.Annotations), "the Secret must exist before the Job starts")
	require.Equal(t, r.secrets[releaseName+"-sylk"].Data["postgres-dsn"], s.Data[ref.Key], "the Job migrates the services' database")
}

// checkEgress: the workers, whose pods run task commands, reach only DNS,
// their peers and the internet without private or metadata addresses; the
// other services' egress is not restricted.
func checkEgress(t *testing.T, name string, np *networkingv1.NetworkPolicy) {
	t.Helper()
	if name != "worker" {
		require.Equal(t, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}, np.Spec.PolicyTypes)
		require.Empty(t, np.Spec.Egress)
		return
	}
	require.Contains(t, np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress)
	require.Len(t, np.Spec.Egress, 3)
	dns := np.Spec.Egress[0]
	require.Empty(t, dns.To, "DNS to any resolver")
	for _, p := range dns.Ports {
		require.Equal(t, 53, p.Port.IntValue())
	}
	require.Len(t, np.Spec.Egress[1].To, 2, "the peers of the values")
	var except []string
	for _, peer := range np.Spec.Egress[2].To {
		require.NotNil(t, peer.IPBlock)
		except = append(except, peer.IPBlock.Except...)
	}
	for _, cidr := range []string{"10.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12", "192.168.0.0/16", "fe80::/10", "fc00::/7"} {
		require.Contains(t, except, cidr, "tasks must not reach %s", cidr)
	}
}

// checkGRPCIngress: a service's gRPC port admits the release's services
// that call it, never the worker's pods (task commands run there, and the
// worker calls no service) nor the migration Job's.
func checkGRPCIngress(t *testing.T, r rendered, name string, np *networkingv1.NetworkPolicy) {
	t.Helper()
	if name == "gateway" {
		return
	}
	worker := r.deployments[objectName("worker")].Spec.Template.Labels
	migrate := r.jobs[releaseName+"-sylk-migrate"].Spec.Template.Labels
	gateway := r.deployments[objectName("gateway")].Spec.Template.Labels
	found := false
	for _, rule := range np.Spec.Ingress {
		if !slices.ContainsFunc(rule.Ports, func(p networkingv1.NetworkPolicyPort) bool {
			return p.Port != nil && (p.Port.String() == "grpc" || p.Port.IntValue() == grpcPort)
		}) {
			continue
		}
		found = true
		require.NotEmpty(t, rule.From, "%s: gRPC from any source", name)
		admitsGateway := false
		for _, peer := range rule.From {
			require.Nil(t, peer.IPBlock, "%s: gRPC from an address block", name)
			require.Nil(t, peer.NamespaceSelector, "%s: gRPC from other namespaces", name)
			require.NotNil(t, peer.PodSelector, name)
			sel, err := metav1.LabelSelectorAsSelector(peer.PodSelector)
			require.NoError(t, err)
			require.False(t, sel.Matches(labels.Set(worker)), "%s: the worker's pods, where task commands run, reach its gRPC port", name)
			require.False(t, sel.Matches(labels.Set(migrate)), "%s: the migration Job reaches its gRPC port", name)
			admitsGateway = admitsGateway || sel.Matches(labels.Set(gateway))
		}
		require.True(t, admitsGateway, "%s: the gateway, which calls every service, must reach its gRPC port", name)
	}
	require.True(t, found, "%s: no ingress rule for gRPC", name)
}

func TestHelmValues(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		args    []string
		wantErr string
		check   func(t *testing.T, r rendered)
	}{
		{
			name:    "bootstrap key too short",
			args:    []string{"--set", "auth.bootstrapKey=sylk_short"},
			wantErr: "auth.bootstrapKey must start with",
		},
		{
			name:    "bootstrap key without prefix",
			args:    []string{"--set", "auth.bootstrapKey=" + strings.Repeat("k", 40)},
			wantErr: "auth.bootstrapKey must start with",
		},
		{
			name: "bootstrap key given",
			args: []string{"--set", "auth.bootstrapKey=sylk_" + strings.Repeat("k", 40)},
			check: func(t *testing.T, r rendered) {
				require.Equal(t, "sylk_"+strings.Repeat("k", 40), string(r.secrets[releaseName+"-sylk"].Data["bootstrap-key"]))
			},
		},
		{
			name:    "internal key too short",
			args:    []string{"--set", "internal.key=short"},
			wantErr: "internal.key must have at least 32 characters",
		},
		{
			name: "internal key given",
			args: []string{"--set", "internal.key=" + strings.Repeat("i", 32)},
			check: func(t *testing.T, r rendered) {
				require.Equal(t, strings.Repeat("i", 32), string(r.secrets[releaseName+"-sylk"].Data["internal-key"]))
			},
		},
		{
			name:    "no database",
			args:    []string{"--set", "postgres.dsn="},
			wantErr: "set postgres.dsn or postgres.existingSecret",
		},
		{
			name:    "gateway without a peer",
			args:    []string{"--set", "academic.enabled=false"},
			wantErr: "the gateway needs the academic service",
		},
		{
			name: "services disabled",
			args: []string{"--set", "gateway.enabled=false", "--set", "academic.enabled=false"},
			check: func(t *testing.T, r rendered) {
				require.NotContains(t, r.deployments, objectName("academic"))
				require.NotContains(t, r.services, objectName("gateway"))
				require.Len(t, r.deployments, len(services)-2)
			},
		},
		{
			name:    "orchestrator without the guide",
			args:    []string{"--set", "gateway.enabled=false", "--set", "guide.enabled=false"},
			wantErr: "the orchestrator needs the guide service",
		},
		{
			name:    "archivalist without the guide",
			args:    []string{"--set", "gateway.enabled=false", "--set", "guide.enabled=false", "--set", "architect.enabled=false", "--set", "orchestrator.enabled=false"},
			wantErr: "the archivalist needs the guide service",
		},
		{
			name:    "internal TLS without a Secret",
			args:    []string{"--set", "internalTLS.enabled=true"},
			wantErr: "internalTLS.enabled needs internalTLS.existingSecret",
		},
		{
			name: "internal TLS",
			args: []string{"--set", "internalTLS.enabled=true", "--set", "internalTLS.existingSecret=mesh-tls"},
			check: func(t *testing.T, r rendered) {
				for _, name := range services {
					d := r.deployments[objectName(name)]
					require.NotNil(t, d, name)
					c := d.Spec.Template.Spec.Containers[0]
					env := map[string]string{}
					for _, e := range c.Env {
						env[e.Name] = e.Value
					}
					require.Equal(t, "/etc/sylk/tls/tls.crt", env["SYLK_TLS_CERT_FILE"], name)
					require.Equal(t, "/etc/sylk/tls/tls.key", env["SYLK_TLS_KEY_FILE"], name)
					require.Equal(t, "/etc/sylk/tls/ca.crt", env["SYLK_TLS_CA_FILE"], name)
					require.True(t, slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
						return m.Name == "tls" && m.MountPath == "/etc/sylk/tls" && m.ReadOnly
					}), "%s mounts the Secret", name)
					require.True(t, slices.ContainsFunc(d.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool {
						return v.Name == "tls" && v.Secret != nil && v.Secret.SecretName == "mesh-tls"
					}), "%s has the Secret as a volume", name)
					for _, p := range []*corev1.Probe{c.StartupProbe, c.ReadinessProbe, c.LivenessProbe} {
						require.Nil(t, p.GRPC, "%s: the kubelet's gRPC probe speaks no TLS", name)
						require.NotNil(t, p.HTTPGet, name)
						if name == "gateway" && p == c.ReadinessProbe {
							require.Equal(t, "/readyz", p.HTTPGet.Path, name)
							continue
						}
						require.Equal(t, "/healthz", p.HTTPGet.Path, name)
					}
				}
			},
		},
		{
			name: "stores TLS",
			args: []string{"--set", "storesTLS.existingSecret=stores-ca", "--set", "storesTLS.clientCertificate=true"},
			check: func(t *testing.T, r rendered) {
				mounted := func(spec corev1.PodSpec) {
					t.Helper()
					require.True(t, slices.ContainsFunc(spec.Volumes, func(v corev1.Volume) bool {
						return v.Name == "stores-tls" && v.Secret != nil && v.Secret.SecretName == "stores-ca"
					}))
					require.True(t, slices.ContainsFunc(spec.Containers[0].VolumeMounts, func(m corev1.VolumeMount) bool {
						return m.Name == "stores-tls" && m.MountPath == "/etc/sylk/stores-tls" && m.ReadOnly
					}))
				}
				for _, name := range services {
					spec := r.deployments[objectName(name)].Spec.Template.Spec
					mounted(spec)
					env := map[string]string{}
					for _, e := range spec.Containers[0].Env {
						env[e.Name] = e.Value
					}
					for _, store := range []string{"NATS", "REDIS"} {
						require.Equal(t, "/etc/sylk/stores-tls/ca.crt", env["SYLK_"+store+"_TLS_CA_FILE"], name)
						require.Equal(t, "/etc/sylk/stores-tls/tls.crt", env["SYLK_"+store+"_TLS_CERT_FILE"], name)
						require.Equal(t, "/etc/sylk/stores-tls/tls.key", env["SYLK_"+store+"_TLS_KEY_FILE"], name)
					}
				}
				mounted(r.jobs[releaseName+"-sylk-migrate"].Spec.Template.Spec)
			},
		},
		{
			name:    "worker egress without peers",
			args:    []string{"--set", "networkPolicy.enabled=true", "--set", "networkPolicy.workerEgress.enabled=true"},
			wantErr: "networkPolicy.workerEgress.peers must list the PostgreSQL, NATS and Redis",
		},
		{
			name:    "worker egress without network policies",
			args:    []string{"--set", "networkPolicy.workerEgress.enabled=true", "--set", "networkPolicy.workerEgress.peers[0].podSelector.matchLabels.app=nats"},
			wantErr: "networkPolicy.workerEgress.enabled needs networkPolicy.enabled",
		},
		{
			name: "worker egress off",
			args: []string{"--set", "networkPolicy.enabled=true"},
			check: func(t *testing.T, r rendered) {
				np := r.netpols[objectName("worker")]
				require.NotNil(t, np)
				require.Equal(t, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}, np.Spec.PolicyTypes)
				require.Empty(t, np.Spec.Egress)
				for _, name := range services {
					checkGRPCIngress(t, r, name, r.netpols[objectName(name)])
				}
			},
		},
		{
			name: "migrations disabled",
			args: []string{"--set", "migrations.enabled=false"},
			check: func(t *testing.T, r rendered) {
				require.Empty(t, r.jobs)
				require.Len(t, r.secrets, 1, "only the chart's Secret, no hook Secret")
			},
		},
		{
			name: "only the database in an existing Secret",
			args: []string{"--set", "postgres.existingSecret=db", "--set", "postgres.existingSecretKey=uri"},
			check: func(t *testing.T, r rendered) {
				own := r.secrets[releaseName+"-sylk"]
				require.NotNil(t, own)
				require.NotContains(t, own.Data, "postgres-dsn")
				require.Contains(t, own.Data, "redis-url")
				require.Len(t, r.secrets, 1, "no hook Secret: the Job reads the existing one")
				env := r.jobs[releaseName+"-sylk-migrate"].Spec.Template.Spec.Containers[0].Env
				i := slices.IndexFunc(env, func(e corev1.EnvVar) bool { return e.Name == "SYLK_POSTGRES_DSN" })
				require.Equal(t, "db", env[i].ValueFrom.SecretKeyRef.Name)
				require.Equal(t, "uri", env[i].ValueFrom.SecretKeyRef.Key)
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if tt.wantErr != "" {
				_, err := templateChart(t, tt.args...)
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			tt.check(t, renderChart(t, tt.args...))
		})
	}
}

// The gateway's Ingress is off by default; on, it routes every path (the
// console at / and the API under /v1/) to the gateway's HTTP port.
func TestHelmIngress(t *testing.T) {
	t.Parallel()
	require.Empty(t, renderChart(t).ingresses)
	r := renderChart(t, "--set", "gateway.ingress.enabled=true", "--set", "gateway.ingress.className=nginx",
		"--set", "gateway.ingress.host=sylk.example.test")
	name := objectName("gateway")
	ing := r.ingresses[name]
	require.NotNil(t, ing, "ingresses: %v", r.ingresses)
	require.Equal(t, "nginx", *ing.Spec.IngressClassName)
	require.Len(t, ing.Spec.Rules, 1)
	rule := ing.Spec.Rules[0]
	require.Equal(t, "sylk.example.test", rule.Host)
	require.Len(t, rule.HTTP.Paths, 1)
	p := rule.HTTP.Paths[0]
	require.Equal(t, "/", p.Path)
	require.Equal(t, networkingv1.PathTypePrefix, *p.PathType)
	require.Equal(t, name, p.Backend.Service.Name)
	require.Equal(t, "http", p.Backend.Service.Port.Name)
	svc := r.services[name]
	require.NotNil(t, svc)
	require.True(t, slices.ContainsFunc(svc.Spec.Ports, func(sp corev1.ServicePort) bool { return sp.Name == "http" }),
		"the gateway's Service has the port the Ingress names")
}

// autoscaledServices are the services a HorizontalPodAutoscaler may scale:
// their pods hold no work of their own (not the orchestrator's run leases,
// the worker's running tasks nor the librarian's index operations).
var autoscaledServices = []string{"guide", "architect", "archivalist", "academic", "gateway"}

// The chart refuses a misspelt value at every level it reads instead of
// ignoring it, and takes the values it ships and the example's.
func TestHelmSchemaRejectsMisspeltValues(t *testing.T) {
	t.Parallel()
	_, err := templateChart(t)
	require.NoError(t, err, "the default values (with the required keys)")
	_, err = templateChart(t, "-f", filepath.Join(chartDir, "ci", "external-values.yaml"))
	require.NoError(t, err, "ci/external-values.yaml")
	for set, key := range map[string]string{
		"replcias=2":                              "replcias",
		"gateway.replcias=2":                      "replcias",
		"worker.drainTimout=5m":                   "drainTimout",
		"guide.autoscaling.maxReplica=3":          "maxReplica",
		"gateway.ingress.hots=sylk.example.test":  "hots",
		"podDisruptionBudget.maxUnavaliable=1":    "maxUnavaliable",
		"topologySpread.maxSkwe=2":                "maxSkwe",
		"serviceMonitor.intervall=10s":            "intervall",
		"internal.exisitngSecret=x":               "exisitngSecret",
		"probes.readiness.periodSecond=5":         "periodSecond",
		"guide.resources.limts.memory=1Gi":        "limts",
		"orchestrator.autoscaling.enabled=true":   "autoscaling",                   // not a stateless service
		"worker.terminationGracePeriodSeconds=60": "terminationGracePeriodSeconds", // derived from drainTimeout
	} {
		_, err := templateChart(t, "--set", set)
		require.ErrorContains(t, err, "Additional property "+key+" is not allowed", "--set %s must be refused", set)
	}
	for set, want := range map[string]string{
		"worker.drainTimeout=10 minutes": "worker.drainTimeout: Does not match pattern",
		"shutdownDelay=500ms":            "shutdownDelay: Does not match pattern",
		"log.level=verbose":              "log.level: log.level must be one of",
		"gateway.service.type=Ingress":   "gateway.service.type: gateway.service.type must be one of",
		"worker.roles=coder":             "worker.roles: Does not match pattern",
	} {
		_, err := templateChart(t, "--set", set)
		require.ErrorContains(t, err, want, "--set %s must be refused", set)
	}
}

// Without a cluster to look the release's Secret up (helm template, as
// GitOps tools render), the same values give the same objects: the chart
// generates no key, so neither its Secret nor the pods' checksum of it
// changes from one render to the next, and no pod is rolled for nothing.
func TestHelmRenderIsRepeatable(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{nil, {"-f", filepath.Join(chartDir, "ci", "external-values.yaml")}} {
		first, err := templateChart(t, args...)
		require.NoError(t, err)
		second, err := templateChart(t, args...)
		require.NoError(t, err)
		require.Equal(t, first, second, "two renders of %v differ", args)
	}

	base := []string{"template", releaseName, chartDir, "--namespace", namespace}
	_, err := runHelm(t, slices.Concat(base, []string{"--set", "internal.key=" + testInternalKey})...)
	require.ErrorContains(t, err, "set auth.bootstrapKey")
	require.ErrorContains(t, err, "auth.existingSecret")
	_, err = runHelm(t, slices.Concat(base, []string{"--set", "auth.bootstrapKey=" + testBootstrapKey})...)
	require.ErrorContains(t, err, "set internal.key")
	require.ErrorContains(t, err, "internal.existingSecret")

	// Keys in existing Secrets need no value.
	out, err := runHelm(t, slices.Concat(base, []string{"--set", "auth.existingSecret=a", "--set", "internal.existingSecret=i"})...)
	require.NoError(t, err)
	r := decodeChart(t, out)
	own := r.secrets[releaseName+"-sylk"]
	require.NotNil(t, own, "the stores' URLs are still values")
	require.NotContains(t, own.Data, "bootstrap-key")
	require.NotContains(t, own.Data, "internal-key")
	env := r.deployments[objectName("guide")].Spec.Template.Spec.Containers[0].Env
	i := slices.IndexFunc(env, func(e corev1.EnvVar) bool { return e.Name == "SYLK_INTERNAL_KEY" })
	require.GreaterOrEqual(t, i, 0)
	require.Equal(t, "i", env[i].ValueFrom.SecretKeyRef.Name)
}

func graceSeconds(t *testing.T, d *appsv1.Deployment) int64 {
	t.Helper()
	require.NotNil(t, d.Spec.Template.Spec.TerminationGracePeriodSeconds, d.Name)
	return *d.Spec.Template.Spec.TerminationGracePeriodSeconds
}

func preStopSleep(d *appsv1.Deployment) int64 {
	lc := d.Spec.Template.Spec.Containers[0].Lifecycle
	if lc == nil || lc.PreStop == nil || lc.PreStop.Sleep == nil {
		return 0
	}
	return lc.PreStop.Sleep.Seconds
}

// The worker's grace period follows its drain timeout, set once in the
// values: the pod is not killed while running tasks finish. The gateway
// sleeps in preStop so that load balancers drop it before it stops serving,
// and its grace period counts the sleep.
func TestHelmGracePeriods(t *testing.T) {
	t.Parallel()
	const shutdownDelay, margin = 5, 30
	tests := []struct {
		name      string
		args      []string
		wantDrain string
		wantGrace map[string]int64 // service -> seconds; others 30
		wantSleep map[string]int64 // service -> preStop sleep; others none
	}{
		{
			name:      "defaults",
			wantDrain: "10m",
			wantGrace: map[string]int64{"worker": 600 + shutdownDelay + margin, "gateway": 30 + 5, "orchestrator": 45},
			wantSleep: map[string]int64{"gateway": 5},
		},
		{
			name:      "longer drain",
			args:      []string{"--set", "worker.drainTimeout=1h30m", "--set", "worker.drainMarginSeconds=60", "--set", "shutdownDelay=10s"},
			wantDrain: "1h30m",
			wantGrace: map[string]int64{"worker": 5400 + 10 + 60, "gateway": 35, "orchestrator": 45},
			wantSleep: map[string]int64{"gateway": 5},
		},
		{
			name: "own grace periods",
			args: []string{"--set", "guide.terminationGracePeriodSeconds=90", "--set", "gateway.preStopSleepSeconds=0",
				"--set", "terminationGracePeriodSeconds=40", "--set", "worker.preStopSleepSeconds=3", "--set", "worker.drainTimeout=90s"},
			wantDrain: "90s",
			wantGrace: map[string]int64{"guide": 90, "worker": 3 + 90 + shutdownDelay + margin, "gateway": 40,
				"architect": 40, "orchestrator": 45, "librarian": 40, "archivalist": 40, "academic": 40},
			wantSleep: map[string]int64{"worker": 3},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := renderChart(t, tt.args...)
			for _, name := range services {
				d := r.deployments[objectName(name)]
				require.NotNil(t, d, name)
				want, ok := tt.wantGrace[name]
				if !ok {
					want = 30
				}
				require.Equal(t, want, graceSeconds(t, d), "%s: terminationGracePeriodSeconds", name)
				require.Equal(t, tt.wantSleep[name], preStopSleep(d), "%s: preStop sleep", name)
				if name == "worker" {
					requireEnvValue(t, d.Spec.Template.Spec.Containers[0].Env, "SYLK_WORKER_DRAIN_TIMEOUT", tt.wantDrain)
				}
			}
		})
	}
	_, err := templateChart(t, "--set", "guide.terminationGracePeriodSeconds=5")
	require.ErrorContains(t, err, "guide: the termination grace period must be longer than its preStop sleep plus shutdownDelay")
	_, err = templateChart(t, "--set", "gateway.terminationGracePeriodSeconds=10", "--set", "gateway.preStopSleepSeconds=8")
	require.ErrorContains(t, err, "gateway: the termination grace period must be longer")
}

// A service that may run several pods gets a PodDisruptionBudget selecting
// exactly its pods; one with a single replica gets none.
func TestHelmDisruptionBudgets(t *testing.T) {
	t.Parallel()
	one := intstr.FromInt32(1)
	tests := []struct {
		name string
		args []string
		want map[string]policyv1.PodDisruptionBudgetSpec // service -> budget (selector aside)
	}{
		{name: "one replica each", want: map[string]policyv1.PodDisruptionBudgetSpec{}},
		{
			name: "external services",
			args: []string{"-f", filepath.Join(chartDir, "ci", "external-values.yaml")},
			want: map[string]policyv1.PodDisruptionBudgetSpec{
				"guide": {MaxUnavailable: &one}, "librarian": {MaxUnavailable: &one},
				"worker": {MaxUnavailable: &one}, "gateway": {MaxUnavailable: &one},
			},
		},
		{
			name: "own budgets",
			args: []string{"--set", "guide.replicas=3", "--set", "guide.podDisruptionBudget.minAvailable=2",
				"--set", "worker.replicas=4", "--set-string", "worker.podDisruptionBudget.maxUnavailable=25%",
				"--set", "orchestrator.replicas=2", "--set", "orchestrator.podDisruptionBudget.enabled=false",
				"--set", "gateway.autoscaling.enabled=true"},
			want: map[string]policyv1.PodDisruptionBudgetSpec{
				"guide":   {MinAvailable: new(intstr.FromInt32(2))},
				"worker":  {MaxUnavailable: new(intstr.FromString("25%"))},
				"gateway": {MaxUnavailable: &one}, // autoscaled from one replica
			},
		},
		{
			name: "shared budget",
			args: []string{"--set", "architect.replicas=3", "--set", "podDisruptionBudget.maxUnavailable=null",
				"--set", "podDisruptionBudget.minAvailable=1", "--set", "podDisruptionBudget.unhealthyPodEvictionPolicy="},
			want: map[string]policyv1.PodDisruptionBudgetSpec{"architect": {MinAvailable: &one}},
		},
		{
			name: "disabled",
			args: []string{"--set", "podDisruptionBudget.enabled=false", "--set", "guide.replicas=3"},
			want: map[string]policyv1.PodDisruptionBudgetSpec{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := renderChart(t, tt.args...)
			require.Len(t, r.pdbs, len(tt.want), "PodDisruptionBudgets: %v", slices.Collect(maps.Keys(r.pdbs)))
			for name, want := range tt.want {
				pdb := r.pdbs[objectName(name)]
				require.NotNil(t, pdb, "no PodDisruptionBudget for %s", name)
				require.Equal(t, want.MinAvailable, pdb.Spec.MinAvailable, name)
				require.Equal(t, want.MaxUnavailable, pdb.Spec.MaxUnavailable, name)
				d := r.deployments[objectName(name)]
				require.Equal(t, d.Spec.Selector, pdb.Spec.Selector, "%s: the budget selects exactly the Deployment's pods", name)
				if tt.name == "shared budget" {
					require.Nil(t, pdb.Spec.UnhealthyPodEvictionPolicy)
					continue
				}
				require.NotNil(t, pdb.Spec.UnhealthyPodEvictionPolicy, name)
				require.Equal(t, policyv1.AlwaysAllow, *pdb.Spec.UnhealthyPodEvictionPolicy, "%s: a crash-looping pod does not block drains", name)
			}
		})
	}
	for _, tt := range []struct {
		args    []string
		wantErr string
	}{
		{[]string{"--set", "guide.replicas=2", "--set", "guide.podDisruptionBudget.minAvailable=2"}, "guide.podDisruptionBudget.minAvailable must be less than guide.replicas"},
		{[]string{"--set", "guide.replicas=2", "--set", "guide.podDisruptionBudget.minAvailable=1", "--set", "guide.podDisruptionBudget.maxUnavailable=1"}, "set minAvailable or maxUnavailable, not both"},
		{[]string{"--set", "guide.replicas=2", "--set", "podDisruptionBudget.minAvailable=1"}, "set minAvailable or maxUnavailable, not both"},
	} {
		_, err := templateChart(t, tt.args...)
		require.ErrorContains(t, err, tt.wantErr, "%v", tt.args)
	}
}

// Autoscaling is off by default; on, each stateless service gets an
// autoscaler of its Deployment, which then leaves replicas to it.
func TestHelmAutoscalers(t *testing.T) {
	t.Parallel()
	require.Empty(t, renderChart(t).hpas)
	var args []string
	for _, name := range autoscaledServices {
		args = append(args, "--set", name+".autoscaling.enabled=true")
	}
	args = append(args, "--set", "gateway.autoscaling.maxReplicas=10", "--set", "gateway.autoscaling.targetMemoryUtilizationPercentage=80",
		"--set", "guide.autoscaling.behavior.scaleDown.stabilizationWindowSeconds=600")
	r := renderChart(t, args...)
	require.Len(t, r.hpas, len(autoscaledServices))
	for _, name := range services {
		d := r.deployments[objectName(name)]
		hpa := r.hpas[objectName(name)]
		if !slices.Contains(autoscaledServices, name) {
			require.Nil(t, hpa, name)
			require.NotNil(t, d.Spec.Replicas, "%s: not autoscaled, replicas stay", name)
			continue
		}
		require.NotNil(t, hpa, "no HorizontalPodAutoscaler for %s", name)
		require.Nil(t, d.Spec.Replicas, "%s: replicas are left to the autoscaler, so an upgrade does not reset them", name)
		ref := hpa.Spec.ScaleTargetRef
		require.Equal(t, autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: d.Name}, ref)
		require.Equal(t, int32(2), *hpa.Spec.MinReplicas, name)
		want := map[corev1.ResourceName]int32{corev1.ResourceCPU: 75}
		if name == "gateway" {
			require.Equal(t, int32(10), hpa.Spec.MaxReplicas)
			want[corev1.ResourceMemory] = 80
		} else {
			require.Equal(t, int32(6), hpa.Spec.MaxReplicas, name)
		}
		got := map[corev1.ResourceName]int32{}
		for _, m := range hpa.Spec.Metrics {
			require.Equal(t, autoscalingv2.ResourceMetricSourceType, m.Type)
			require.Equal(t, autoscalingv2.UtilizationMetricType, m.Resource.Target.Type)
			got[m.Resource.Name] = *m.Resource.Target.AverageUtilization
		}
		require.Equal(t, want, got, name)
		if name == "guide" {
			require.Equal(t, int32(600), *hpa.Spec.Behavior.ScaleDown.StabilizationWindowSeconds)
		}
	}

	_, err := templateChart(t, "--set", "guide.autoscaling.enabled=true", "--set", "guide.autoscaling.maxReplicas=1")
	require.ErrorContains(t, err, "guide.autoscaling.maxReplicas must be at least minReplicas")
	_, err = templateChart(t, "--set", "guide.autoscaling.enabled=true", "--set", "guide.autoscaling.targetCPUUtilizationPercentage=null")
	require.ErrorContains(t, err, "guide.autoscaling needs targetCPUUtilizationPercentage or targetMemoryUtilizationPercentage")
}

// Each service's pods are spread over zones and nodes, counting only the
// pods of its current ReplicaSet.
func TestHelmTopologySpread(t *testing.T) {
	t.Parallel()
	r := renderChart(t)
	for _, name := range services {
		d := r.deployments[objectName(name)]
		tsc := d.Spec.Template.Spec.TopologySpreadConstraints
		require.Len(t, tsc, 2, name)
		var keys []string
		for _, c := range tsc {
			keys = append(keys, c.TopologyKey)
			require.Equal(t, int32(1), c.MaxSkew, name)
			require.Equal(t, corev1.ScheduleAnyway, c.WhenUnsatisfiable, "%s: a single node or zone still schedules", name)
			require.Equal(t, []string{"pod-template-hash"}, c.MatchLabelKeys, name)
			sel, err := metav1.LabelSelectorAsSelector(c.LabelSelector)
			require.NoError(t, err)
			require.True(t, sel.Matches(labels.Set(d.Spec.Template.Labels)), "%s: the constraint counts the service's own pods", name)
			for _, other := range services {
				if other != name {
					require.False(t, sel.Matches(labels.Set(r.deployments[objectName(other)].Spec.Template.Labels)), "%s counts %s's pods", name, other)
				}
			}
		}
		require.Equal(t, []string{"topology.kubernetes.io/zone", "kubernetes.io/hostname"}, keys, name)
	}

	r = renderChart(t, "--set", "topologySpread.enabled=false")
	for _, name := range services {
		require.Empty(t, r.deployments[objectName(name)].Spec.Template.Spec.TopologySpreadConstraints, name)
	}
	r = renderChart(t, "--set", "topologySpread.whenUnsatisfiable=DoNotSchedule", "--set", "topologySpread.topologyKeys={kubernetes.io/hostname}")
	tsc := r.deployments[objectName("worker")].Spec.Template.Spec.TopologySpreadConstraints
	require.Len(t, tsc, 1)
	require.Equal(t, corev1.DoNotSchedule, tsc[0].WhenUnsatisfiable)
}

// The ServiceMonitor is off by default; on, it scrapes the metrics port of
// every Service of the release and nothing else.
func TestHelmServiceMonitor(t *testing.T) {
	t.Parallel()
	require.Empty(t, renderChart(t).monitors)
	r := renderChart(t, "--set", "serviceMonitor.enabled=true", "--set", "serviceMonitor.labels.release=prometheus",
		"--set", "serviceMonitor.interval=15s", "--set", "serviceMonitor.scrapeTimeout=10s")
	require.Len(t, r.monitors, 1)
	sm := r.monitors[releaseName+"-sylk"]
	require.NotNil(t, sm)
	require.Equal(t, "prometheus", sm.Metadata.Labels["release"], "the label Prometheus selects ServiceMonitors by")
	require.Equal(t, []string{namespace}, sm.Spec.NamespaceSelector.MatchNames)
	require.Len(t, sm.Spec.Endpoints, 1)
	ep := sm.Spec.Endpoints[0]
	require.Equal(t, "metrics", ep.Port)
	require.Equal(t, "/metrics", ep.Path)
	require.Equal(t, "15s", ep.Interval)
	require.Equal(t, "10s", ep.ScrapeTimeout)
	sel, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
	require.NoError(t, err)
	for _, name := range services {
		svc := r.services[objectName(name)]
		require.True(t, sel.Matches(labels.Set(svc.Labels)), "%s's Service is scraped", name)
		require.True(t, slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == ep.Port }),
			"%s's Service has the port %s", name, ep.Port)
		require.NotEmpty(t, svc.Labels["app.kubernetes.io/component"], "the target label")
	}
	require.Contains(t, sm.Spec.TargetLabels, "app.kubernetes.io/component")
}
