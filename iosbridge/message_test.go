package iosbridge

import (
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

func TestMessageValidate(t *testing.T) {
	prof := node("A", 2, 1)
	badProf := node("A", 2, 1.5)
	offer := rankProfile("j", 2, 0.5)
	offer.Node, offer.Peers = "A", []PeerComm{{Rank: 1, Messages: 1, Bytes: 10}}
	offerOfC, badOffer, hugeOffer := offer, offer, offer
	offerOfC.Node = "C"
	badOffer.Peers = []PeerComm{{Rank: 1, Bytes: -1}}
	hugeOffer.Peers = make([]PeerComm, MaxOfferPeers+1)
	// A three-way exchange: C forwards A's request with its rank j/5 as the relay.
	relayProf := node("C", 2, 0, RankID{"j", 5})
	relay := rankProfile("j", 5, 0.5)
	relay.Node = "C"
	relayOfB, relayOfOrigin, relayIsOffer := relay, relay, offer
	relayOfB.Node = "B"
	relayOfOrigin.Node = "A"
	relayIsOffer.Node = "C"
	originProf := prof
	originProf.Ranks = []RankID{{"j", 5}}
	partner, partnerOfC := offer, offer
	partner.Rank, partnerOfC.Rank, partnerOfC.Node = 3, 3, "C"
	ok := []Message{
		{Kind: KindJoin, From: "A", To: "B"},
		{Kind: KindAnnounce, From: "A", To: "B", Peers: []string{"C"}},
		{Kind: KindHeartbeat, From: "A", To: "B", Profile: &prof},
		{Kind: KindLeave, From: "A", To: "B"},
		{Kind: KindStealRequest, From: "A", To: "B", Origin: "A", ID: 1, TTL: 3, Profile: &prof},
		{Kind: KindStealRequest, From: "C", To: "B", Origin: "A", ID: 1, TTL: 0, Profile: &prof},
		{Kind: KindStealAccept, From: "B", To: "A", Origin: "A", ID: 1, Rank: RankID{"j", 0}},
		{Kind: KindStealFail, From: "B", To: "A", Origin: "A", ID: 1},
		{Kind: KindStealRequest, From: "A", To: "B", Origin: "A", ID: 1, TTL: 3, Profile: &prof, Locale: LocaleRegional},
		{Kind: KindStealRequest, From: "A", To: "B", Origin: "A", ID: 1, TTL: 3, Profile: &prof, InCluster: true, Cluster: "x", Wide: true},
		{Kind: KindHeartbeat, From: "A", To: "B", ID: 4},
		{Kind: KindPong, From: "B", To: "A", ID: 4},
		{Kind: KindBalanceRequest, From: "A", To: "B", Origin: "A", ID: 2, Profile: &prof},
		{Kind: KindBalanceOffer, From: "A", To: "B", Origin: "B", ID: 2, Profile: &prof},
		{Kind: KindStealAccept, From: "B", To: "A", Origin: "A", Rank: RankID{"j", 0}}, // a push
		{Kind: KindStealRequest, From: "C", To: "B", Origin: "A", ID: 1, TTL: 2, Profile: &prof, Exchange: true, Offer: &offer},
		{Kind: KindStealAccept, From: "B", To: "A", Origin: "A", ID: 1, Rank: RankID{"j", 0}, Swap: RankID{"j", 2}},
		{Kind: KindStealRequest, From: "C", To: "B", Origin: "A", ID: 1, TTL: 2, Profile: &prof, Exchange: true, Offer: &offer, Relay: &relay, RelayProfile: &relayProf},
		{Kind: KindStealAccept, From: "B", To: "A", Origin: "A", ID: 1, Rank: RankID{"j", 0}, Swap: RankID{"j", 2}, SwapTo: "C"},
		{Kind: KindRelayAccept, From: "B", To: "C", Origin: "A", ID: 1, Rank: RankID{"j", 5}, Swap: RankID{"j", 2}},
		{Kind: KindRelayReady, From: "C", To: "B", Origin: "A", ID: 1, Rank: RankID{"j", 5}, Swap: RankID{"j", 2}},
		{Kind: KindExchangeCancel, From: "A", To: "B", Origin: "A", ID: 1},
		{Kind: KindExchangeCommit, From: "A", To: "B", Origin: "A", ID: 1},
		{Kind: KindMigrationFailed, From: "B", To: "A", Origin: "A", ID: 1, Rank: RankID{"j", 0}},
		{Kind: KindMigrationFailed, From: "B", To: "A", Origin: "A", Rank: RankID{"j", 0}}, // a push's
		{Kind: KindStealRequest, From: "A", To: "B", Origin: "A", ID: 1, TTL: 2, Profile: &prof, Exchange: true, Offer: &offer, OfferPartner: &partner},
		{Kind: KindStealAccept, From: "B", To: "A", Origin: "A", ID: 1, Rank: RankID{"j", 0}, Pair: RankID{"j", 1}, Swap: RankID{"j", 2}, SwapPair: RankID{"j", 3}},
		{Kind: KindHeartbeat, From: "A", To: "B", Profile: &prof, Best: []Hint{{Node: "A", Rank: 2}}, Hosts: []Hint{{Node: "C", Rank: 1, Hops: MaxHintHops}}},
	}
	for _, m := range ok {
		if err := m.Validate(); err != nil {
			t.Errorf("%+v: %v", m, err)
		}
	}
	bad := map[string]Message{
		"unknown kind":           {Kind: "steal", From: "A", To: "B"},
		"empty kind":             {From: "A", To: "B"},
		"empty from":             {Kind: KindJoin, To: "B"},
		"empty to":               {Kind: KindJoin, From: "A"},
		"to self":                {Kind: KindJoin, From: "A", To: "A"},
		"negative TTL":           {Kind: KindStealRequest, From: "A", To: "B", Origin: "A", TTL: -1, Profile: &prof},
		"huge TTL":               {Kind: KindStealRequest, From: "A", To: "B", Origin: "A", TTL: MaxTTL + 1, Profile: &prof},
		"request no profile":     {Kind: KindStealRequest, From: "A", To: "B", Origin: "A"},
		"request no origin":      {Kind: KindStealRequest, From: "A", To: "B", Profile: &prof},
		"profile not origin":     {Kind: KindStealRequest, From: "C", To: "B", Origin: "C", Profile: &prof},
		"bad profile":            {Kind: KindHeartbeat, From: "A", To: "B", Profile: &badProf},
		"accept no rank":         {Kind: KindStealAccept, From: "B", To: "A", Origin: "A"},
		"accept neg rank":        {Kind: KindStealAccept, From: "B", To: "A", Origin: "A", Rank: RankID{"j", -1}},
		"accept not to orig":     {Kind: KindStealAccept, From: "B", To: "C", Origin: "A", Rank: RankID{"j", 0}},
		"fail not to origin":     {Kind: KindStealFail, From: "B", To: "C", Origin: "A"},
		"announce empty peer":    {Kind: KindAnnounce, From: "A", To: "B", Peers: []string{""}},
		"pong without ID":        {Kind: KindPong, From: "B", To: "A"},
		"bad locale":             {Kind: KindStealRequest, From: "A", To: "B", Origin: "A", ID: 1, Profile: &prof, Locale: LocaleUnknown + 1},
		"huge cluster":           {Kind: KindStealRequest, From: "A", To: "B", Origin: "A", ID: 1, Profile: &prof, Cluster: strings.Repeat("x", MaxClusterName+1)},
		"balance no profile":     {Kind: KindBalanceRequest, From: "A", To: "B", ID: 2},
		"balance no ID":          {Kind: KindBalanceRequest, From: "A", To: "B", Profile: &prof},
		"offer of another":       {Kind: KindBalanceOffer, From: "C", To: "B", ID: 2, Profile: &prof},
		"NaN gain":               {Kind: KindStealAccept, From: "B", To: "A", Origin: "A", Rank: RankID{"j", 0}, Gain: math.NaN()},
		"offer not exchange":     {Kind: KindStealRequest, From: "A", To: "B", Origin: "A", ID: 1, Profile: &prof, Offer: &offer},
		"offer in heartbeat":     {Kind: KindHeartbeat, From: "A", To: "B", Exchange: true, Offer: &offer},
		"offered rank elsewhere": {Kind: KindStealRequest, From: "A", To: "B", Origin: "A", ID: 1, Profile: &prof, Exchange: true, Offer: &offerOfC},
		"bad offer":              {Kind: KindStealRequest, From: "A", To: "B", Origin: "A", ID: 1, Profile: &prof, Exchange: true, Offer: &badOffer},
		"huge offer":             {Kind: KindStealRequest, From: "A", To: "B", Origin: "A", ID: 1, Profile: &prof, Exchange: true, Offer: &hugeOffer},
		"swap of itself":         {Kind: KindStealAccept, From: "B", To: "A", Origin: "A", Rank: RankID{"j", 0}, Swap: RankID{"j", 0}},
		"swap in a fail":         {Kind: KindStealFail, From: "B", To: "A", Origin: "A", Swap: RankID{"j", 0}},
		"swap neg rank":          {Kind: KindStealAccept, From: "B", To: "A", Origin: "A", Rank: RankID{"j", 0}, Swap: RankID{"j", -1}},
		"swap to without swap":   {Kind: KindStealAccept, From: "B", To: "A", Origin: "A", Rank: RankID{"j", 0}, SwapTo: "C"},
		"swap to the origin":     {Kind: KindStealAccept, From: "B", To: "A", Origin: "A", Rank: RankID{"j", 0}, Swap: RankID{"j", 2}, SwapTo: "A"},
		"relay without offer":    {Kind: KindStealRequest, From: "C", To: "B", Origin: "A", ID: 1, Profile: &prof, Exchange: true, Relay: &relay, RelayProfile: &relayProf},
		"relay without profile":  {Kind: KindStealRequest, From: "C", To: "B", Origin: "A", ID: 1, Profile: &prof, Exchange: true, Offer: &offer, Relay: &relay},
		"relay of another node":  {Kind: KindStealRequest, From: "C", To: "B", Origin: "A", ID: 1, Profile: &prof, Exchange: true, Offer: &offer, Relay: &relayOfB, RelayProfile: &relayProf},
		"relay at the origin":    {Kind: KindStealRequest, From: "C", To: "B", Origin: "A", ID: 1, Profile: &prof, Exchange: true, Offer: &offer, Relay: &relayOfOrigin, RelayProfile: &originProf},
		"relay is the offer":     {Kind: KindStealRequest, From: "C", To: "B", Origin: "A", ID: 1, Profile: &prof, Exchange: true, Offer: &offer, Relay: &relayIsOffer, RelayProfile: &relayProf},
		"relay not hosted":       {Kind: KindStealRequest, From: "C", To: "B", Origin: "A", ID: 1, Profile: &prof, Exchange: true, Offer: &offer, Relay: &relay, RelayProfile: &prof},
		"relay accept no origin": {Kind: KindRelayAccept, From: "B", To: "C", ID: 1, Rank: RankID{"j", 5}, Swap: RankID{"j", 2}},
		"relay accept no swap":   {Kind: KindRelayAccept, From: "B", To: "C", Origin: "A", ID: 1, Rank: RankID{"j", 5}},
		"relay accept no ID":     {Kind: KindRelayAccept, From: "B", To: "C", Origin: "A", Rank: RankID{"j", 5}, Swap: RankID{"j", 2}},
		"relay accept from orig": {Kind: KindRelayAccept, From: "A", To: "C", Origin: "A", ID: 1, Rank: RankID{"j", 5}, Swap: RankID{"j", 2}},
		"relay ready no swap":    {Kind: KindRelayReady, From: "C", To: "B", Origin: "A", ID: 1, Rank: RankID{"j", 5}},
		"relay ready to orig":    {Kind: KindRelayReady, From: "C", To: "A", Origin: "A", ID: 1, Rank: RankID{"j", 5}, Swap: RankID{"j", 2}},
		"cancel no ID":           {Kind: KindExchangeCancel, From: "A", To: "B", Origin: "A"},
		"cancel no origin":       {Kind: KindExchangeCancel, From: "A", To: "B", ID: 1},
		"cancel with a swap":     {Kind: KindExchangeCancel, From: "A", To: "B", Origin: "A", ID: 1, Swap: RankID{"j", 2}},
		"commit no ID":           {Kind: KindExchangeCommit, From: "A", To: "B", Origin: "A"},
		"failed with no rank":    {Kind: KindMigrationFailed, From: "B", To: "A", Origin: "A", ID: 1},
		"failed with no origin":  {Kind: KindMigrationFailed, From: "B", To: "A", ID: 1, Rank: RankID{"j", 0}},
		"partner without offer":  {Kind: KindStealRequest, From: "A", To: "B", Origin: "A", ID: 1, Profile: &prof, Exchange: true, OfferPartner: &partner},
		"partner is the offer":   {Kind: KindStealRequest, From: "A", To: "B", Origin: "A", ID: 1, Profile: &prof, Exchange: true, Offer: &offer, OfferPartner: &offer},
		"partner elsewhere":      {Kind: KindStealRequest, From: "A", To: "B", Origin: "A", ID: 1, Profile: &prof, Exchange: true, Offer: &offer, OfferPartner: &partnerOfC},
		"pair without swap":      {Kind: KindStealAccept, From: "B", To: "A", Origin: "A", Rank: RankID{"j", 0}, Pair: RankID{"j", 1}, SwapPair: RankID{"j", 3}},
		"pair without swap pair": {Kind: KindStealAccept, From: "B", To: "A", Origin: "A", Rank: RankID{"j", 0}, Pair: RankID{"j", 1}, Swap: RankID{"j", 2}},
		"pair is the rank":       {Kind: KindStealAccept, From: "B", To: "A", Origin: "A", Rank: RankID{"j", 0}, Pair: RankID{"j", 0}, Swap: RankID{"j", 2}, SwapPair: RankID{"j", 3}},
		"swap pair is the swap":  {Kind: KindStealAccept, From: "B", To: "A", Origin: "A", Rank: RankID{"j", 0}, Pair: RankID{"j", 1}, Swap: RankID{"j", 2}, SwapPair: RankID{"j", 2}},
		"pair in a relay":        {Kind: KindStealAccept, From: "B", To: "A", Origin: "A", Rank: RankID{"j", 0}, Pair: RankID{"j", 1}, Swap: RankID{"j", 2}, SwapPair: RankID{"j", 3}, SwapTo: "C"},
		"hints in a steal":       {Kind: KindStealRequest, From: "A", To: "B", Origin: "A", ID: 1, Profile: &prof, Best: []Hint{{Node: "A", Rank: 2}}},
		"hint without node":      {Kind: KindHeartbeat, From: "A", To: "B", Hosts: []Hint{{Rank: 1}}},
		"hint NaN rank":          {Kind: KindHeartbeat, From: "A", To: "B", Best: []Hint{{Node: "C", Rank: math.NaN()}}},
		"hint too far":           {Kind: KindHeartbeat, From: "A", To: "B", Best: []Hint{{Node: "C", Rank: 1, Hops: MaxHintHops + 1}}},
		"too many hints":         {Kind: KindHeartbeat, From: "A", To: "B", Hosts: make([]Hint, MaxHints+1)},
	}
	for name, m := range bad {
		if err := m.Validate(); err == nil {
			t.Errorf("%s: %+v accepted", name, m)
		}
	}
}

func TestProfilesValidate(t *testing.T) {
	for _, p := range []NodeProfile{
		{}, {Node: "n", CPUs: -1}, {Node: "n", EffectiveCPUs: math.NaN()}, {Node: "n", Availability: -0.1},
		{Node: "n", MemFreeBytes: 2, MemTotalBytes: 1}, {Node: "n", Ranks: []RankID{{"", 0}}},
	} {
		if p.Validate() == nil {
			t.Errorf("node profile %+v accepted", p)
		}
	}
	for _, r := range []RankProfile{
		{}, {Job: "j", Rank: -1}, {Job: "j", CPUUse: math.Inf(1)}, {Job: "j", StateBytes: -1},
		{Job: "j", Peers: []PeerComm{{Rank: 1, Bytes: -1}}}, {Job: "j", IterationTime: -time.Second},
	} {
		if r.Validate() == nil {
			t.Errorf("rank profile %+v accepted", r)
		}
	}
	if err := (LinkProfile{From: "a", To: "b", BandwidthBps: -1}).Validate(); err == nil {
		t.Error("negative bandwidth accepted")
	}
}

func TestLinkObserveSmoothsBandwidth(t *testing.T) {
	l := LinkProfile{From: "a", To: "b"}
	if err := l.Observe(10e6, time.Second, t0, 0.5); err != nil { // first sample: 10 MB/s
		t.Fatal(err)
	}
	if err := l.Observe(20e6, time.Second, t0, 0.5); err != nil { // .5·20 + .5·10 = 15 MB/s
		t.Fatal(err)
	}
	approx(t, "bandwidth", l.BandwidthBps, 15e6)
	if l.Samples != 2 || l.Observe(0, time.Second, t0, .5) == nil || l.Observe(1, time.Second, t0, 0) == nil {
		t.Fatalf("%+v", l)
	}
}

func TestMessagesRoundTripMsgpack(t *testing.T) {
	prof := node("A", 4, 0.5, ids("j", 1, 2)...)
	prof.SampledAt = t0
	in := Message{Kind: KindStealRequest, From: "A", To: "B", Origin: "A", ID: 9, TTL: 3, Profile: &prof}
	b, err := msgpack.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "steal_request") || !strings.Contains(string(b), "effective_cpus") {
		t.Fatal("wire format should use the msgpack tag names")
	}
	var out Message
	if err := msgpack.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	out.Profile.SampledAt = out.Profile.SampledAt.UTC()
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("round trip:\n in %+v\nout %+v", in, out)
	}
	if err := out.Validate(); err != nil {
		t.Fatal(err)
	}
	r := rankProfile("j", 3, 0.5)
	r.Peers = []PeerComm{{Rank: 1, Bytes: 10, Messages: 1}}
	r.LastMigration = t0
	b, err = msgpack.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var r2 RankProfile
	if err := msgpack.Unmarshal(b, &r2); err != nil {
		t.Fatal(err)
	}
	r2.LastMigration = r2.LastMigration.UTC()
	if !reflect.DeepEqual(r, r2) {
		t.Fatalf("rank profile round trip:\n%+v\n%+v", r, r2)
	}
}

// The exchange fields survive the wire: a forwarded request with an offer, its partner and
// a relay, and the accepts of a pair swap and of a three-way exchange.
func TestExchangeMessagesRoundTripMsgpack(t *testing.T) {
	prof := node("A", 2, 0, ids("j", 2, 3)...)
	relayProf := node("C", 2, 0, ids("j", 5)...)
	offer, partner, relay := rankProfile("j", 2, 0.5), rankProfile("j", 3, 0.5), rankProfile("j", 5, 0.5)
	offer.Node, partner.Node, relay.Node = "A", "A", "C"
	offer.Peers = []PeerComm{{Rank: 3, Bytes: 10, Messages: 1}}
	for _, in := range []Message{
		{Kind: KindStealRequest, From: "C", To: "B", Origin: "A", ID: 9, TTL: 2, Profile: &prof, Exchange: true,
			Offer: &offer, OfferPartner: &partner, Relay: &relay, RelayProfile: &relayProf},
		{Kind: KindStealAccept, From: "B", To: "A", Origin: "A", ID: 9, Rank: RankID{"j", 0}, Pair: RankID{"j", 1}, Swap: RankID{"j", 2}, SwapPair: RankID{"j", 3}},
		{Kind: KindStealAccept, From: "B", To: "A", Origin: "A", ID: 9, Rank: RankID{"j", 0}, Swap: RankID{"j", 2}, SwapTo: "C"},
		{Kind: KindRelayAccept, From: "B", To: "C", Origin: "A", ID: 9, Rank: RankID{"j", 5}, Swap: RankID{"j", 2}, CPUUse: 0.5},
		{Kind: KindRelayReady, From: "C", To: "B", Origin: "A", ID: 9, Rank: RankID{"j", 5}, Swap: RankID{"j", 2}},
		{Kind: KindExchangeCancel, From: "C", To: "B", Origin: "A", ID: 9},
		{Kind: KindExchangeCommit, From: "A", To: "B", Origin: "A", ID: 9},
		{Kind: KindMigrationFailed, From: "C", To: "B", Origin: "A", ID: 9, Rank: RankID{"j", 5}},
	} {
		b, err := msgpack.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		var out Message
		if err := msgpack.Unmarshal(b, &out); err != nil {
			t.Fatal(err)
		}
		if err := out.Validate(); err != nil {
			t.Fatalf("%s after the round trip: %v", in.Kind, err)
		}
		for _, p := range []*NodeProfile{out.Profile, out.RelayProfile} {
			if p != nil {
				p.SampledAt = p.SampledAt.UTC()
			}
		}
		for _, r := range []*RankProfile{out.Offer, out.OfferPartner, out.Relay} {
			if r != nil {
				r.LastMigration = r.LastMigration.UTC()
			}
		}
		if !reflect.DeepEqual(in, out) {
			t.Fatalf("round trip:\n in %+v\nout %+v", in, out)
		}
	}
}
