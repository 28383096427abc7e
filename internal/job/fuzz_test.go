package job_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/reconf"
	"github.com/mpios/mpios/iosbridge"
	"github.com/mpios/mpios/profiler"
)

// Every control-plane message is decoded from bytes any NATS client can publish. Each fuzz
// test checks one decoder: it never panics, nor does the message's Validate, and whatever
// decodes encodes again to bytes that decode to the same value with the same verdict.

// fuzzDecode runs that property for message type T; validate may be nil.
func fuzzDecode[T any](f *testing.F, validate func(T) error, seeds ...T) {
	for _, s := range seeds {
		data, err := job.Encode(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte{0x80})
	f.Add([]byte("\xde\xff\xff")) // a map announcing 65535 entries, with none
	f.Fuzz(func(t *testing.T, data []byte) {
		var v T
		if err := job.Decode(data, &v); err != nil {
			return
		}
		verdict := validate != nil && validate(v) == nil
		b1 := encodeSorted(t, v)
		var again T
		if err := job.Decode(b1, &again); err != nil {
			t.Fatalf("re-encoded %+v does not decode: %v", v, err)
		}
		if b2 := encodeSorted(t, again); !bytes.Equal(b1, b2) {
			t.Fatalf("re-encoding differs:\n%x\n%x", b1, b2)
		}
		if validate != nil && (validate(again) == nil) != verdict {
			t.Fatalf("%+v: validity changed by a round trip", v)
		}
	})
}

// encodeSorted encodes like job.Encode, with map keys sorted so that equal values give
// equal bytes.
func encodeSorted(t *testing.T, v any) []byte {
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.SetSortMapKeys(true)
	if err := enc.Encode(v); err != nil {
		t.Fatalf("encode %+v: %v", v, err)
	}
	return buf.Bytes()
}

var at = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

// Control: requests to a job, its reconfiguration log and migrations.

func FuzzDecodeControlRequest(f *testing.F) {
	fuzzDecode(f, job.ControlRequest.Validate,
		job.ControlRequest{Kind: job.ControlMigrate, Rank: 1, To: "n2", Ranks: []int{1, 3}, Reason: "pcmd migrate"},
		job.ControlRequest{Kind: job.ControlMigrate, Rank: 2, To: "n2", Reason: "ios atsras: swap",
			Exchange: &job.ExchangePart{Origin: "n1", ID: 7, Parties: []string{"n1", "n2"}}},
		job.ControlRequest{Kind: job.ControlCheckpoint})
}

func FuzzDecodeControlReply(f *testing.F) {
	fuzzDecode[job.ControlReply](f, nil, job.ControlReply{OK: true, Message: "moved"}, job.ControlReply{Error: "no"})
}

func FuzzDecodeReconfLog(f *testing.F) {
	fuzzDecode(f, reconf.Log.Validate, reconf.Log{Entries: []reconf.Reconfiguration{
		{Seq: 1, Kind: reconf.Checkpoint, State: reconf.Committed},
		{Seq: 2, Kind: reconf.Migrate, Ranks: []int{0}, To: "n1", State: reconf.Proposed}}})
}

func FuzzDecodeMigrateRequest(f *testing.F) {
	fuzzDecode(f, func(m job.MigrateRequest) error { return m.Validate(4) },
		job.MigrateRequest{Seq: 1, Rank: 2, Handover: "10.0.0.1:4000", Iteration: 10, StateBytes: 1 << 20})
}

func FuzzDecodeMigrateReport(f *testing.F) {
	fuzzDecode[job.MigrateReport](f, nil, job.MigrateReport{Seq: 1, Rank: 2, To: "n2", OK: true, Pause: time.Second})
}

func FuzzDecodeMigrateReply(f *testing.F) {
	fuzzDecode[job.MigrateReply](f, nil, job.MigrateReply{Node: "n2", PID: 7}, job.MigrateReply{Error: "no slot"})
}

func FuzzDecodeSuccessorGone(f *testing.F) {
	fuzzDecode[job.SuccessorGone](f, nil, job.SuccessorGone{Seq: 2, Rank: 1, Reason: "exit 1"})
}

func FuzzDecodeJobInfo(f *testing.F) {
	fuzzDecode[job.JobInfo](f, nil, job.JobInfo{Job: "j", Size: 2,
		Ranks:      []job.JobRank{{Rank: 0, Node: "n1", PID: 10}},
		Migrations: []job.Migration{{Seq: 1, Rank: 0, From: "n1", To: "n2", State: reconf.Committed, At: at}}})
}

// Rendezvous and events.

func FuzzDecodeHello(f *testing.F) {
	fuzzDecode(f, func(h job.Hello) error { return h.Validate(4) }, job.Hello{Rank: 1, Addr: "127.0.0.1:5000", PID: 9, Host: "h"})
}

func FuzzDecodeTable(f *testing.F) {
	fuzzDecode[job.Table](f, nil, job.Table{Addrs: []string{"a:1", "b:2"}}, job.Table{Error: "too late"})
}

func FuzzDecodeEvent(f *testing.F) {
	fuzzDecode[job.Event](f, nil, job.Event{Kind: job.EventRankFailed, Rank: 2, Reason: "killed"}, job.Event{Kind: job.EventAbort})
}

func FuzzDecodeAbort(f *testing.F) {
	fuzzDecode[job.Abort](f, nil, job.Abort{Rank: 1, Code: 3, Message: "bad input"})
}

func FuzzDecodeLost(f *testing.F) {
	fuzzDecode[job.Lost](f, nil, job.Lost{Observer: 0, Rank: 1, Reason: "EOF"})
}

func FuzzDecodeRankOutput(f *testing.F) {
	fuzzDecode[job.RankOutput](f, nil, job.RankOutput{Stream: job.StreamStdout, Seq: 1, Line: []byte("hello"), Partial: true})
}

func FuzzDecodeRankExit(f *testing.F) {
	fuzzDecode[job.RankExit](f, nil, job.RankExit{Code: -1, Signal: 9, Sent: 3, Reason: "lease expired"})
}

// Nodes: heartbeats, discovery, spawn and signal.

func nodeInfo() job.NodeInfo {
	return job.NodeInfo{Name: "n1", Slots: 4, Used: 1, Load: [3]float64{0.5, 1, 2}, Advertise: "10.0.0.1",
		PID: 42, Version: "v", Interval: time.Second, Seq: 7,
		Ranks: []job.RankInfo{{Job: "j", Rank: 0, PID: 43, Started: at}}}
}

func FuzzDecodeNodeInfo(f *testing.F) {
	fuzzDecode(f, job.NodeInfo.Validate, nodeInfo(), job.NodeInfo{Name: "n2", Leaving: true, Interval: time.Second})
}

func FuzzDecodeNodeView(f *testing.F) {
	fuzzDecode(f, func(v job.NodeView) error { return v.Self.Validate() },
		job.NodeView{Self: nodeInfo(), Peers: []job.PeerInfo{{Info: nodeInfo(), Age: time.Second}}})
}

func FuzzDecodeSpawnRequest(f *testing.F) {
	fuzzDecode(f, job.SpawnRequest.Validate, job.SpawnRequest{Job: "j", Rank: 1, Path: "/opt/mpios/bin/ring",
		Args: []string{"-n", "5"}, Env: []string{"MPIOS_SECRET=00"}, Dir: "/tmp",
		Out: "mpios.job.j.rank.1.out", Exit: "_INBOX.x", KeepAlive: time.Second},
		job.SpawnRequest{Job: "j", Rank: 1, Path: "/opt/mpios/bin/ring", Replaces: []int{2}})
}

func FuzzDecodeSpawnReply(f *testing.F) {
	fuzzDecode[job.SpawnReply](f, nil, job.SpawnReply{Node: "n1", PID: 10}, job.SpawnReply{Refusal: job.RefuseNoSlot, Error: "pcmd: node n1"})
}

func FuzzDecodeSignalRequest(f *testing.F) {
	fuzzDecode(f, job.SignalRequest.Validate, job.SignalRequest{Job: "j", Rank: 0, Signal: 15})
}

func FuzzDecodeSignalReply(f *testing.F) {
	fuzzDecode[job.SignalReply](f, nil, job.SignalReply{NotFound: true}, job.SignalReply{Error: "x"})
}

// Checkpoint pieces and manifests.

func FuzzDecodePieceRequest(f *testing.F) {
	fuzzDecode(f, job.PieceRequest.Validate, job.PieceRequest{Job: "j", Seq: 3, Rank: 1})
}

func FuzzDecodePieceReply(f *testing.F) {
	fuzzDecode[job.PieceReply](f, nil, job.PieceReply{Addr: "10.0.0.1:7000", Token: []byte("0123456789abcdef"), Size: 1 << 20})
}

func FuzzDecodeManifestsRequest(f *testing.F) {
	fuzzDecode(f, func(r job.ManifestsRequest) error { return job.ValidateID(r.Job) }, job.ManifestsRequest{Job: "j"})
}

func FuzzDecodeManifestsReply(f *testing.F) {
	fuzzDecode[job.ManifestsReply](f, nil, job.ManifestsReply{Node: "n1", Manifests: [][]byte{[]byte(`{"job":"j","seq":1}`)}})
}

// IOS: the agents' protocol, their state, and the ranks' profiles.

func FuzzDecodeIOSMessage(f *testing.F) {
	fuzzDecode(f, iosbridge.Message.Validate,
		iosbridge.Message{Kind: iosbridge.KindStealRequest, From: "n1", To: "n2", Origin: "n1", ID: 1, TTL: 3},
		iosbridge.Message{Kind: iosbridge.KindHeartbeat, From: "n1", To: "n2", ID: 4, Bandwidth: 12.5e6},
		iosbridge.Message{Kind: iosbridge.KindRelayReady, From: "n3", To: "n2", Origin: "n1", ID: 1,
			Rank: iosbridge.RankID{Job: "j", Rank: 5}, Swap: iosbridge.RankID{Job: "j", Rank: 2}},
		iosbridge.Message{Kind: iosbridge.KindExchangeCancel, From: "n1", To: "n2", Origin: "n1", ID: 1},
		iosbridge.Message{Kind: iosbridge.KindExchangeCommit, From: "n1", To: "n2", Origin: "n1", ID: 1},
		iosbridge.Message{Kind: iosbridge.KindMigrationFailed, From: "n2", To: "n1", Origin: "n1", ID: 1, Rank: iosbridge.RankID{Job: "j", Rank: 5}})
}

func FuzzDecodeIOSState(f *testing.F) {
	fuzzDecode(f, job.IOSState.Validate, job.IOSState{Node: "n1", Policy: "mpiios", JobPolicies: map[string]string{"j": "none", "k": "sras"},
		Availability: 0.5, EffectiveCPUs: 2, CPUs: 2, Peers: []string{"n2"}, PeerBandwidth: map[string]float64{"n2": 12.5e6},
		Events: []job.IOSEvent{{At: at, Kind: job.IOSGive, Job: "j", Rank: 1, Peer: "n2"}}, Profiles: [][]byte{[]byte("{}")}})
}

// FuzzDecodeRankProfile covers the profiles ranks publish on job.ProfileSubject (JSON): the
// node's agent decodes them and hands them to its policy.
func FuzzDecodeRankProfile(f *testing.F) {
	seed, err := json.Marshal(profiler.RankProfile{Job: "j", Rank: 1, Node: "n1", Since: at, At: at.Add(time.Second),
		ElapsedSeconds: 1, CommSeconds: 0.25, CompSeconds: 0.75})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Add([]byte(`{"job":"j","rank":-1,"elapsed_seconds":1e308}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var p profiler.RankProfile
		if json.Unmarshal(data, &p) != nil {
			return
		}
		verdict := p.IOS().Validate() == nil
		b, err := json.Marshal(p)
		if err != nil {
			return // e.g. a time beyond year 9999: it cannot be re-encoded, and was not used
		}
		var again profiler.RankProfile
		if err := json.Unmarshal(b, &again); err != nil {
			t.Fatalf("re-encoded %s does not decode: %v", b, err)
		}
		if (again.IOS().Validate() == nil) != verdict {
			t.Fatalf("%s: validity changed by a round trip", b)
		}
	})
}

// A nil where a time is expected made msgpack panic inside every receiver of a heartbeat;
// found by FuzzDecodeNodeView.
func TestDecodeRefusesANilTimeWithAnError(t *testing.T) {
	data := []byte("\x81\xa5ranks\x91\x81\xa7started\xc0")
	var info job.NodeInfo
	if err := job.Decode(data, &info); err == nil {
		t.Fatalf("decoded %+v", info)
	}
}

// An array header announcing 3e9 elements made msgpack allocate them all and the receiver die
// out of memory; found by FuzzDecodeReconfLog.
func TestDecodeRefusesAnnouncedLengthsTheMessageCannotHold(t *testing.T) {
	for name, data := range map[string][]byte{
		"array32 of 3e9":     []byte("\x81\xa7entries\xdd\xb2\xd0\x5e\x00"),
		"map32 of 4e9":       []byte("\xdf\xee\x6b\x28\x00"),
		"nested too deep":    bytes.Repeat([]byte{0x91}, 300),
		"bin32 of 4 GiB":     []byte("\x81\xa4line\xc6\xff\xff\xff\xff"),
		"truncated float":    []byte("\xcb\x00"),
		"never-used code c1": []byte("\xc1"),
		"trailing bytes":     []byte("\x80\x80"),
	} {
		var l reconf.Log
		if err := job.Decode(data, &l); err == nil {
			t.Errorf("%s: decoded %+v", name, l)
		}
	}
	// Real messages still decode, including empty and nil fields.
	for _, v := range []any{nodeInfo(), reconf.Log{}, job.SpawnRequest{Job: "j", Args: []string{}}, job.RankOutput{Line: []byte{}}} {
		data, _ := job.Encode(v)
		into := reflect.New(reflect.TypeOf(v))
		if err := job.Decode(data, into.Interface()); err != nil {
			t.Errorf("%T: %v", v, err)
		}
	}
}

// BenchmarkDecodeNodeView measures job.Decode (shape check and msgpack) against msgpack
// alone, on a discovery reply naming 64 peers.
func BenchmarkDecodeNodeView(b *testing.B) {
	v := job.NodeView{Self: nodeInfo()}
	for range 64 {
		v.Peers = append(v.Peers, job.PeerInfo{Info: nodeInfo(), Age: time.Second})
	}
	data, err := job.Encode(v)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("job.Decode", func(b *testing.B) {
		for b.Loop() {
			var got job.NodeView
			if err := job.Decode(data, &got); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("msgpack.Unmarshal", func(b *testing.B) {
		for b.Loop() {
			var got job.NodeView
			if err := msgpack.Unmarshal(data, &got); err != nil {
				b.Fatal(err)
			}
		}
	})
}
