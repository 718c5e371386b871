package deploy

import (
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// checkRepositories checks a service's pod against the volume of
// repositories mounted at mountPath ("" when the chart has none): the
// services that run git mount it there, from one claim, and the librarian
// keeps its clones of git URLs on it, where the orchestrator looks for
// them; no other service mounts it. Without it the librarian clones into
// an emptyDir.
func checkRepositories(t *testing.T, name string, pod corev1.PodSpec, c corev1.Container, mountPath string) string {
	t.Helper()
	i := slices.IndexFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "repositories" })
	if mountPath == "" || !slices.Contains(gitServices, name) {
		require.Negative(t, i, "%s mounts no repositories", name)
		require.Empty(t, envValue(c.Env, "SYLK_ORCHESTRATOR_CLONE_DIR"), name)
		if name == "librarian" {
			requireMountedEmptyDir(t, pod, c, envValue(c.Env, "SYLK_LIBRARIAN_DATA_DIR"))
		}
		return ""
	}
	require.GreaterOrEqual(t, i, 0, "%s mounts the repositories", name)
	m := c.VolumeMounts[i]
	require.Equal(t, mountPath, m.MountPath, "%s: the repositories are at the same path in every pod", name)
	require.False(t, m.ReadOnly, name)
	v := pod.Volumes[slices.IndexFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name })]
	require.NotNil(t, v.PersistentVolumeClaim, "%s: the repositories are a claim, not a pod's own directory", name)
	switch name {
	case "librarian":
		require.Equal(t, mountPath+"/clones", envValue(c.Env, "SYLK_LIBRARIAN_DATA_DIR"), "the clones of git URLs are on the volume")
		require.False(t, slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "clones" }))
	case "orchestrator":
		require.Equal(t, mountPath+"/clones", envValue(c.Env, "SYLK_ORCHESTRATOR_CLONE_DIR"), "the orchestrator knows the clones of git URLs")
	case "worker":
		// Workspaces stay the worker's own.
		requireMountedEmptyDir(t, pod, c, envValue(c.Env, "SYLK_WORKER_WORKSPACE_ROOT"))
	}
	return v.PersistentVolumeClaim.ClaimName
}

// The chart mounts one volume of repositories where its values say, in the
// pods of every service that runs git, from its own claim or an existing one.
func TestHelmRepositoriesVolume(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		args      []string
		mountPath string
		// claim is the claim mounted; created when the chart makes it.
		claim   string
		created *corev1.PersistentVolumeClaimSpec
	}{
		{
			name: "defaults", mountPath: repositoriesPath, claim: releaseName + "-sylk-repositories",
			created: &corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}},
		},
		{
			name: "one node, a storage class",
			args: []string{"--set", "repositories.mountPath=/srv/repos", "--set", "repositories.accessModes={ReadWriteOnce}",
				"--set", "repositories.storageClass=fast", "--set", "repositories.size=5Gi"},
			mountPath: "/srv/repos", claim: releaseName + "-sylk-repositories",
			created: &corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				StorageClassName: new("fast")},
		},
		{
			name:      "an existing claim",
			args:      []string{"--set", "repositories.existingClaim=shared-repos"},
			mountPath: repositoriesPath, claim: "shared-repos",
		},
		{name: "disabled", args: []string{"--set", "repositories.enabled=false"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := renderChart(t, tt.args...)
			for _, name := range services {
				d := r.deployments[objectName(name)]
				require.NotNil(t, d, name)
				c := d.Spec.Template.Spec.Containers[0]
				claim := checkRepositories(t, name, d.Spec.Template.Spec, c, tt.mountPath)
				if tt.mountPath != "" && slices.Contains(gitServices, name) {
					require.Equal(t, tt.claim, claim, name)
				}
			}
			if tt.created == nil {
				require.Empty(t, r.claims, "the chart makes no claim")
				return
			}
			require.Len(t, r.claims, 1)
			pvc := r.claims[tt.claim]
			require.NotNil(t, pvc, "the chart makes the claim %s", tt.claim)
			require.Equal(t, tt.created.AccessModes, pvc.Spec.AccessModes)
			require.Equal(t, tt.created.StorageClassName, pvc.Spec.StorageClassName)
			require.Equal(t, "keep", pvc.Annotations["helm.sh/resource-policy"], "uninstalling keeps the users' repositories")
			size := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
			require.False(t, size.IsZero())
			if strings.Contains(strings.Join(tt.args, " "), "size=5Gi") {
				require.True(t, size.Equal(resource.MustParse("5Gi")))
			}
		})
	}
}

func TestHelmRepositoriesMountPathIsChecked(t *testing.T) {
	t.Parallel()
	for path, want := range map[string]string{
		"repos": "repositories.mountPath must be an absolute path",
		"/tmp":  "repositories.mountPath must be a directory of its own",
	} {
		_, err := templateChart(t, "--set", "repositories.mountPath="+path)
		require.ErrorContains(t, err, want, path)
	}
}
