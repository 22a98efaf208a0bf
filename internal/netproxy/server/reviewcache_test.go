package server

import (
	"context"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	authv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	authnv1client "k8s.io/client-go/kubernetes/typed/authentication/v1"
)

// reviewClient answers "good" as the agent's ServiceAccount and anything
// else as unauthenticated, after gate is closed (nil: at once), or after sleep (then
// answering ctx's error if it ends first); reviews counts the reviews it received. Not
// fake.Clientset's reactors: they run one at a time.
func reviewClient(reviews *atomic.Int64, gate <-chan struct{}) *reviewFake {
	return &reviewFake{Clientset: fake.NewSimpleClientset(), reviews: reviews, gate: gate}
}

type reviewFake struct {
	*fake.Clientset
	reviews *atomic.Int64
	gate    <-chan struct{}
	sleep   time.Duration
}

func (f *reviewFake) AuthenticationV1() authnv1client.AuthenticationV1Interface {
	return reviewFakeV1{f.Clientset.AuthenticationV1(), f}
}

type reviewFakeV1 struct {
	authnv1client.AuthenticationV1Interface
	f *reviewFake
}

func (v reviewFakeV1) TokenReviews() authnv1client.TokenReviewInterface { return v }

func (v reviewFakeV1) Create(ctx context.Context, tr *authv1.TokenReview, _ metav1.CreateOptions) (*authv1.TokenReview, error) {
	f := v.f
	f.reviews.Add(1)
	if f.gate != nil {
		<-f.gate
	}
	if f.sleep > 0 {
		select {
		case <-time.After(f.sleep):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if tr.Spec.Token != "good" {
		return &authv1.TokenReview{}, nil
	}
	return &authv1.TokenReview{Status: authv1.TokenReviewStatus{Authenticated: true, Audiences: []string{"aud"},
		User: authv1.UserInfo{Username: "system:serviceaccount:ns:sa"}}}, nil
}

func bearer(tok string) metadata.MD { return metadata.Pairs("authorization", "Bearer "+tok) }

// TestReviewCache: a token is reviewed once while its answer is cached,
// denials included, and again after the denial TTL.
func TestReviewCache(t *testing.T) {
	var reviews atomic.Int64
	a := &TokenAuth{Namespace: "ns", ServiceAccount: "sa", Audience: "aud", Client: reviewClient(&reviews, nil),
		DenialTTL: 50 * time.Millisecond}
	ctx := context.Background()
	for range 100 {
		if p, err := a.Authenticate(ctx, bearer("good")); err != nil || p.User != "system:serviceaccount:ns:sa" {
			t.Fatalf("good token: %+v, %v", p, err)
		}
		if _, err := a.Authenticate(ctx, bearer("junk")); err == nil || !strings.Contains(err.Error(), "not authenticated") || IsUnavailable(err) {
			t.Fatalf("junk token: error %v, want a denial", err)
		}
	}
	if n := reviews.Load(); n != 2 {
		t.Errorf("%d reviews for 2 tokens asked 100 times each, want 2", n)
	}
	time.Sleep(60 * time.Millisecond)
	_, _ = a.Authenticate(ctx, bearer("junk"))
	if n := reviews.Load(); n != 3 {
		t.Errorf("%d reviews after the denial TTL, want 3 (the denial reviewed again)", n)
	}
}

// TestReviewShared: streams with the same token wait for one review;
// distinct tokens beyond MaxInFlight fail fast with an Unavailable error,
// and a review that outlives Timeout fails them without being cached.
func TestReviewShared(t *testing.T) {
	var reviews atomic.Int64
	gate := make(chan struct{})
	a := &TokenAuth{Namespace: "ns", ServiceAccount: "sa", Audience: "aud", Client: reviewClient(&reviews, gate), MaxInFlight: 2}
	ctx := context.Background()
	var wg sync.WaitGroup
	var ok atomic.Int64
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := a.Authenticate(ctx, bearer("good")); err == nil {
				ok.Add(1)
			}
		}()
	}
	for reviews.Load() < 1 {
		time.Sleep(time.Millisecond)
	}
	// One slot is taken by "good"; "junk-1" takes the other, "junk-2" is refused.
	go func() { _, _ = a.Authenticate(ctx, bearer("junk-1")) }()
	for reviews.Load() < 2 {
		time.Sleep(time.Millisecond)
	}
	start := time.Now()
	_, err := a.Authenticate(ctx, bearer("junk-2"))
	if !IsUnavailable(err) || !strings.Contains(err.Error(), "--token-review-max-in-flight") || time.Since(start) > time.Second {
		t.Errorf("third distinct token with 2 reviews in flight: %v after %s, want an immediate Unavailable naming --token-review-max-in-flight", err, time.Since(start))
	}
	close(gate)
	wg.Wait()
	if ok.Load() != 50 || reviews.Load() != 2 {
		t.Errorf("%d of 50 streams with the same token authenticated with %d reviews, want 50 with 2 (one per token)", ok.Load(), reviews.Load())
	}

	// A review that outlives its timeout fails the stream as Unavailable,
	// and the next stream tries again.
	var slow atomic.Int64
	f := reviewClient(&slow, nil)
	f.sleep = time.Minute
	a = &TokenAuth{Namespace: "ns", ServiceAccount: "sa", Audience: "aud", Client: f, Timeout: 50 * time.Millisecond}
	for i := range 2 {
		start := time.Now()
		if _, err := a.Authenticate(ctx, bearer("good")); !IsUnavailable(err) || time.Since(start) > 10*time.Second {
			t.Errorf("review %d: error %v after %s, want Unavailable after the 50ms timeout", i, err, time.Since(start))
		}
	}
	if slow.Load() != 2 {
		t.Errorf("%d reviews, want 2: a failed review is not cached", slow.Load())
	}
}

// TestAdmission: a connection's streams and a peer's unauthenticated
// streams are capped; authenticated streams free the peer's count and
// ended streams both.
func TestAdmission(t *testing.T) {
	var ad admission
	limits := StreamLimits{PerConnection: 2, PerUnauthenticatedPeer: 3}
	on := func(addr string) context.Context {
		return peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.ParseIP("10.0.0.1"), Port: port(addr)}})
	}
	admit := func(ctx context.Context) (*ticket, codes.Code) {
		tk, _, err := ad.admit(ctx, limits)
		return tk, status.Code(err)
	}
	c1a, _ := admit(on("1"))
	c1b, _ := admit(on("1"))
	if _, code := admit(on("1")); code != codes.ResourceExhausted {
		t.Errorf("third stream on a connection: %v, want ResourceExhausted", code)
	}
	c2, _ := admit(on("2"))
	if _, code := admit(on("3")); code != codes.ResourceExhausted {
		t.Errorf("fourth unauthenticated stream of the peer: %v, want ResourceExhausted", code)
	}
	c1a.authenticatedNow()
	c1a.authenticatedNow() // idempotent
	c3, code := admit(on("3"))
	if code != codes.OK {
		t.Fatalf("after one authenticated: %v, want admitted", code)
	}
	for _, tk := range []*ticket{c1a, c1b, c2, c3} {
		tk.done()
	}
	if len(ad.perConn) != 0 || len(ad.perPeer) != 0 {
		t.Errorf("counts after all streams ended: %v %v, want none", ad.perConn, ad.perPeer)
	}
}

func port(s string) int { n, _ := strconv.Atoi(s); return n }
