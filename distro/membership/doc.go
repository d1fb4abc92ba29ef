// Package membership holds what distro and its memberships share: the Member type, the
// Membership interface, and their errors.
//
// It imports nothing, so that a membership implementation (package distro/gossip, over
// hashicorp/memberlist) need not import distro, and distro need not link it. Package distro
// re-exports all of it: use it from there.
package membership
