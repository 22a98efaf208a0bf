package server

import (
	"context"
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc/metadata"
	authv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func TestTokenAuth(t *testing.T) {
	review := func(status authv1.TokenReviewStatus, err error) *fake.Clientset {
		cs := fake.NewSimpleClientset()
		cs.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
			tr := a.(k8stesting.CreateAction).GetObject().(*authv1.TokenReview)
			if tr.Spec.Token != "good" {
				return true, &authv1.TokenReview{Status: authv1.TokenReviewStatus{Authenticated: false}}, nil
			}
			if len(tr.Spec.Audiences) != 1 || tr.Spec.Audiences[0] != "konnectivity" {
				return true, nil, errors.New("audience not requested")
			}
			return true, &authv1.TokenReview{Status: status}, err
		})
		return cs
	}
	ok := authv1.TokenReviewStatus{Authenticated: true, Audiences: []string{"konnectivity"},
		User: authv1.UserInfo{Username: "system:serviceaccount:kube-system:konnectivity-agent"}}
	md := func(v ...string) metadata.MD { return metadata.Pairs(v...) }
	for _, tc := range []struct {
		name    string
		status  authv1.TokenReviewStatus
		md      metadata.MD
		wantErr string
	}{
		{"valid", ok, md("authorization", "Bearer good"), ""},
		{"no token", ok, md(), "no bearer token"},
		{"not bearer", ok, md("authorization", "Basic good"), "prefix"},
		{"two tokens", ok, md("authorization", "Bearer good", "authorization", "Bearer good"), "2 tokens"},
		{"rejected token", ok, md("authorization", "Bearer bad"), "not authenticated"},
		{"wrong namespace", authv1.TokenReviewStatus{Authenticated: true, Audiences: ok.Audiences, User: authv1.UserInfo{Username: "system:serviceaccount:default:konnectivity-agent"}},
			md("authorization", "Bearer good"), "is not the agent's"},
		{"wrong account", authv1.TokenReviewStatus{Authenticated: true, Audiences: ok.Audiences, User: authv1.UserInfo{Username: "system:serviceaccount:kube-system:other"}},
			md("authorization", "Bearer good"), "is not the agent's"},
		{"not a service account", authv1.TokenReviewStatus{Authenticated: true, Audiences: ok.Audiences, User: authv1.UserInfo{Username: "alice"}},
			md("authorization", "Bearer good"), "not a service account"},
		{"wrong audience", authv1.TokenReviewStatus{Authenticated: true, Audiences: []string{"other"}, User: ok.User},
			md("authorization", "Bearer good"), "audiences"},
		{"review error", authv1.TokenReviewStatus{Error: "boom"}, md("authorization", "Bearer good"), "boom"},
		// An authenticator that ignored the audience returns none: the
		// token was not checked for ours.
		{"no audiences returned", authv1.TokenReviewStatus{Authenticated: true, User: ok.User},
			md("authorization", "Bearer good"), "--authentication-audience"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := &TokenAuth{Namespace: "kube-system", ServiceAccount: "konnectivity-agent", Audience: "konnectivity",
				Client: review(tc.status, nil)}
			p, err := a.Authenticate(context.Background(), tc.md)
			if tc.wantErr == "" {
				if err != nil || p.User != ok.User.Username || p.Node != "" {
					t.Fatalf("Authenticate = %+v, %v", p, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Authenticate error %v, want %q", err, tc.wantErr)
			}
		})
	}
}

func TestTokenAuthPrincipal(t *testing.T) {
	status := func(extra map[string]authv1.ExtraValue) *fake.Clientset {
		cs := fake.NewSimpleClientset()
		cs.PrependReactor("create", "tokenreviews", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, &authv1.TokenReview{Status: authv1.TokenReviewStatus{Authenticated: true, Audiences: []string{"aud"},
				User: authv1.UserInfo{Username: "system:serviceaccount:ns:sa", Groups: []string{"system:serviceaccounts"}, Extra: extra}}}, nil
		})
		return cs
	}
	md := metadata.Pairs("authorization", "Bearer t")
	for _, tc := range []struct {
		name  string
		extra map[string]authv1.ExtraValue
		node  string
	}{
		{"pod-bound token", map[string]authv1.ExtraValue{NodeNameExtra: {"node-a"}}, "node-a"},
		{"token without node-name", nil, ""},
		{"ambiguous node-name", map[string]authv1.ExtraValue{NodeNameExtra: {"node-a", "node-b"}}, ""},
	} {
		a := &TokenAuth{Namespace: "ns", ServiceAccount: "sa", Audience: "aud", Client: status(tc.extra)}
		p, err := a.Authenticate(context.Background(), md)
		if err != nil || p.Node != tc.node || p.User != "system:serviceaccount:ns:sa" || len(p.Groups) != 1 {
			t.Errorf("%s: Authenticate = %+v, %v; want node %q", tc.name, p, err, tc.node)
		}
	}
	// No audience: refused before any review (the review's own audience
	// check would name the flag too, so the reactor proves it is not
	// reached).
	noReview := fake.NewSimpleClientset()
	noReview.PrependReactor("create", "tokenreviews", func(k8stesting.Action) (bool, runtime.Object, error) {
		t.Error("no audience: a TokenReview was made")
		return true, &authv1.TokenReview{Status: authv1.TokenReviewStatus{Authenticated: true,
			User: authv1.UserInfo{Username: "system:serviceaccount:ns:sa"}}}, nil
	})
	a := &TokenAuth{Namespace: "ns", ServiceAccount: "sa", Client: noReview}
	if _, err := a.Authenticate(context.Background(), md); err == nil || !strings.Contains(err.Error(), "needs an audience") {
		t.Errorf("no audience: error %v, want \"needs an audience\"", err)
	}
}
