package spawner

import (
	"fmt"
	"reflect"
	"testing"
)

func TestBaseEnvPassesOnlyListedVariables(t *testing.T) {
	environ := []string{
		"PATH=/usr/bin:/bin", "HOME=/home/pcmd", "PCMD_NATS_TOKEN=s3cret", "PCMD_NATS_PASS=pw",
		"LD_PRELOAD=/tmp/evil.so", "MPIOS_SECRET=node-secret", "LANG=C.UTF-8", "SITE_LICENSE=42", "TZ=UTC",
	}
	got := BaseEnv(environ, []string{"SITE_LICENSE", "MPIOS_SECRET"})
	want := []string{"PATH=/usr/bin:/bin", "HOME=/home/pcmd", "LANG=C.UTF-8", "SITE_LICENSE=42", "TZ=UTC"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("BaseEnv = %q, want %q", got, want)
	}
	if got := BaseEnv([]string{"PCMD_NATS_TOKEN=s3cret", "NOEQUALS"}, nil); len(got) != 0 {
		t.Errorf("BaseEnv passed %q", got)
	}
}

func TestRankEnvNodeOverridesRequest(t *testing.T) {
	base := []string{"PATH=/bin"}
	requested := []string{"MPIOS_JOB_ID=j", "MPIOS_BIND=10.9.9.9", "MPIOS_RANK=3", "MPIOS_NODE=fake"}
	node := []string{"MPIOS_BIND=10.0.0.1", "MPIOS_NODE=n1"}
	got := RankEnv(base, requested, node)
	want := []string{"PATH=/bin", "MPIOS_JOB_ID=j", "MPIOS_RANK=3", "MPIOS_BIND=10.0.0.1", "MPIOS_NODE=n1"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("RankEnv = %q, want %q", got, want)
	}
	if v, _ := Lookup(got, "MPIOS_BIND"); v != "10.0.0.1" {
		t.Errorf("MPIOS_BIND = %q", v)
	}
	if _, ok := Lookup(got, "MPIOS_CKPT_DIR"); ok {
		t.Error("a variable nobody set was found")
	}
}

func ExampleRankEnv() {
	own := BaseEnv([]string{"PATH=/usr/bin", "PCMD_NATS_TOKEN=s3cret"}, nil)
	env := RankEnv(own, []string{"MPIOS_JOB_ID=j1", "MPIOS_BIND=0.0.0.0"}, []string{"MPIOS_BIND=10.0.0.11"})
	fmt.Println(env)
	// Output:
	// [PATH=/usr/bin MPIOS_JOB_ID=j1 MPIOS_BIND=10.0.0.11]
}
