// Package browsertest drives Muster's web console (registry/console) in a
// real headless Chromium, through chromedp, against a real three-node
// cluster on loopback. It is a module of its own so that chromedp stays out
// of the library's dependency graph.
//
//	apt-get install chromium
//	cd registry/console/browsertest && go test ./...
//
// Without Chromium the test skips, unless CI=true, where it fails. The
// screenshots of each page go to $MUSTER_CONSOLE_ARTIFACTS, or to a new
// temporary directory whose path the test logs.
package browsertest
