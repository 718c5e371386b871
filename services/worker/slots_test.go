package worker

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"sylk.dev/sylk/pkg/app"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/testenv"
	"sylk.dev/sylk/pkg/toolexec"
)

// With Redis, a worker takes its subprocess slots from the cluster-wide
// pool unless told not to; without Redis it keeps its own pool.
func TestWorkerSlotPoolChoice(t *testing.T) {
	t.Parallel()
	bus, rc := testenv.NATS(t), testenv.Redis(t)
	for _, tc := range []struct {
		name   string
		shared bool
		redis  bool
		want   bool
	}{
		{"shared with Redis", true, true, true},
		{"not shared", false, true, false},
		{"no Redis", true, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t)
			cfg.SlotsShared = tc.shared
			deps := app.Deps{Log: logx.Discard(), Bus: bus, Registerer: prometheus.NewRegistry()}
			if tc.redis {
				deps.Redis = rc
			}
			svc, err := New(cfg, deps)
			require.NoError(t, err)
			_, cluster := svc.exec.Slots().(*toolexec.ClusterPool)
			require.Equal(t, tc.want, cluster)
			require.Equal(t, !tc.want, svc.exec.Pool() != nil)
		})
	}
}
