// Package credentialprovider turns a provider's registry-credentials
// capability (cloud.RegistryCredentials) into a kubelet image credential
// provider: the exec plugin the kubelet runs per image pull with a
// credentialprovider.kubelet.k8s.io/v1 CredentialProviderRequest on stdin,
// answering with a CredentialProviderResponse on stdout.
//
// A provider ships a plugin with a main of a few lines:
//
//	func main() {
//		os.Exit(credentialprovider.Main(func(ctx context.Context) (cloud.RegistryCredentials, error) {
//			return myprovider.NewRegistryCredentials(ctx)
//		}))
//	}
//
// The response's cacheKeyType follows the credential's scope and its
// cacheDuration its real lifetime, so the kubelet re-executes the plugin
// shortly before the credential expires and never for pulls its cache covers.
//
// A provider that needs to say more (several auth entries, success with no
// credentials, an explicit cacheDuration of 0) implements Responder, or
// passes a ResponderFunc to Main, and answers with a Result. A credential
// for a registry with a path prefix is cached per image, never under the
// host, where other repositories of the registry would find it.
package credentialprovider
