package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/portside-io/portside/internal/localcloud/registry"
	"github.com/portside-io/portside/pkg/localcloud/api"
)

func newCloudRegistriesCommand(f *cloudFlags) *cobra.Command {
	cmd := &cobra.Command{Use: "registries", Aliases: []string{"registry"}, Short: "Image registries, their credentials and trusted token issuers"}
	list := verb(f, "list", "List registries", cobra.NoArgs, func(cmd *cobra.Command, c cloudCall, _ []string) error {
		list, err := c.c.ListRegistries(cmd.Context())
		if err != nil {
			return err
		}
		return f.print(c.w, list, "HOST\tSERVED\tCREATED", func(tw io.Writer) {
			for _, r := range list {
				fmt.Fprintf(tw, "%s\t%v\t%s\n", r.Host, r.Served, r.CreatedAt.Format("2006-01-02T15:04:05Z"))
			}
		})
	})
	add := verb(f, "add HOST", "Register an image registry", cobra.ExactArgs(1), func(cmd *cobra.Command, c cloudCall, args []string) error {
		r, err := c.c.CreateRegistry(cmd.Context(), args[0])
		if err != nil {
			return err
		}
		return c.one(r, "added registry "+r.Host)
	})
	var credReq api.CredentialRequest
	var tokenFile string
	cred := verb(f, "credential IMAGE", "Issue a registry credential for an image", cobra.ExactArgs(1), func(cmd *cobra.Command, c cloudCall, args []string) error {
		credReq.Image = args[0]
		if tokenFile != "" {
			data, err := os.ReadFile(tokenFile)
			if err != nil {
				return fmt.Errorf("--service-account-token-file: %w", err)
			}
			credReq.ServiceAccountToken = strings.TrimSpace(string(data))
		}
		cr, err := c.c.Credential(cmd.Context(), credReq)
		if err != nil {
			return err
		}
		f.output = "json"
		return c.one(cr, "")
	})
	cred.Flags().BoolVar(&credReq.Push, "push", false, "a credential that may also push (to the served registry)")
	cred.Flags().StringVar(&tokenFile, "service-account-token-file", "", "exchange this service-account token (a JWT) for a credential bound to its service account")
	var image string
	push := verb(f, "push", "Build a small image and push it to the served registry", cobra.NoArgs, func(cmd *cobra.Command, c cloudCall, _ []string) error {
		ref, err := registry.SeedServed(cmd.Context(), c.c, image)
		if err != nil {
			return err
		}
		return c.one(map[string]string{"pushed": ref}, "pushed "+ref)
	})
	push.Flags().StringVar(&image, "image", registry.DefaultSeedImage, "repository:tag to push as")
	cmd.AddCommand(list, add, cred, push, newTrustIssuerCommand(f), newIssuersCommand(f), newUntrustIssuerCommand(f))
	return cmd
}

func newTrustIssuerCommand(f *cloudFlags) *cobra.Command {
	var iss api.TokenIssuer
	var keyFile string
	cmd := verb(f, "trust-issuer", "Trust a cluster's service-account token issuer for token exchange", cobra.NoArgs, func(cmd *cobra.Command, c cloudCall, _ []string) error {
		if keyFile == "" {
			return errors.New("--public-key-file is required: the public half of the apiserver's --service-account-signing-key-file")
		}
		data, err := os.ReadFile(keyFile)
		if err != nil {
			return fmt.Errorf("--public-key-file: %w", err)
		}
		iss.PublicKeysPEM = string(data)
		// Trusting an issuer again replaces it whole: say so when that
		// drops its narrowing (a key rotation run without --repository).
		if len(iss.Repositories) == 0 {
			if list, err := c.c.ListTokenIssuers(cmd.Context()); err == nil {
				for _, old := range list {
					if old.Issuer == iss.Issuer && len(old.Repositories) > 0 {
						fmt.Fprintf(cmd.ErrOrStderr(), "warning: issuer %s read only %s; without --repository its exchanged credentials now read every repository\n",
							iss.Issuer, strings.Join(old.Repositories, ", "))
					}
				}
			}
		}
		out, err := c.c.PutTokenIssuer(cmd.Context(), iss)
		if err != nil {
			return err
		}
		msg := fmt.Sprintf("trusted issuer %s for audiences %s", out.Issuer, strings.Join(out.Audiences, ","))
		if len(out.Repositories) > 0 {
			msg += "; exchanged credentials read only " + strings.Join(out.Repositories, ", ")
		}
		return c.one(out, msg)
	})
	cmd.Flags().StringVar(&iss.Issuer, "issuer", "", "the tokens' iss (the apiserver's --service-account-issuer)")
	cmd.Flags().StringArrayVar(&iss.Audiences, "audience", nil, "an accepted token audience (repeatable)")
	cmd.Flags().StringVar(&keyFile, "public-key-file", "", "PEM file of the public key(s) that sign the tokens")
	cmd.Flags().StringArrayVar(&iss.Repositories, "repository", nil,
		"narrow exchanged credentials to a repository, or a prefix ending in /; {namespace} and {serviceAccount} stand for the token's (repeatable; none: every repository), e.g. '{namespace}/'")
	return cmd
}

func newIssuersCommand(f *cloudFlags) *cobra.Command {
	return verb(f, "issuers", "List trusted service-account token issuers", cobra.NoArgs, func(cmd *cobra.Command, c cloudCall, _ []string) error {
		list, err := c.c.ListTokenIssuers(cmd.Context())
		if err != nil {
			return err
		}
		return f.print(c.w, list, "ISSUER\tAUDIENCES\tREPOSITORIES\tCREATED", func(tw io.Writer) {
			for _, i := range list {
				repos := strings.Join(i.Repositories, ",")
				if repos == "" {
					repos = "*"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", i.Issuer, strings.Join(i.Audiences, ","), repos, i.CreatedAt.Format("2006-01-02T15:04:05Z"))
			}
		})
	})
}

func newUntrustIssuerCommand(f *cloudFlags) *cobra.Command {
	return verb(f, "untrust-issuer ISSUER", "Stop trusting a service-account token issuer", cobra.ExactArgs(1), func(cmd *cobra.Command, c cloudCall, args []string) error {
		if err := c.c.DeleteTokenIssuer(cmd.Context(), args[0]); err != nil {
			return err
		}
		return c.one(map[string]string{"untrusted": args[0]}, "untrusted issuer "+args[0])
	})
}
