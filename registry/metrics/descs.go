package metrics

import "github.com/prometheus/client_golang/prometheus"

// descs are the descriptors of every metric, built once per collector (constant labels
// differ between collectors). docs/monitoring.md lists them; keep the two in step.
type descs struct {
	registry, transport, distro, health, raft []*prometheus.Desc

	regServices, regInstances, regSessions, regWatchers                    *prometheus.Desc
	regNsInstances, regNsHealth, regNsSessions, regNsWatchers              *prometheus.Desc
	regWrites, regWriteErrors, regForwarded, regForwardFailures, regServed *prometheus.Desc
	regWatchDelivery, regExpired                                           *prometheus.Desc

	trConns, trDials, trDialFailures, trAccepted, trRefused, trLimited, trKept, trShed *prometheus.Desc
	trFramesIn, trFramesOut, trBytesIn, trBytesOut                                     *prometheus.Desc

	dReady, dLoadDuration, dLoadPeers, dMembers, dRecords, dOwned, dPending              *prometheus.Desc
	dSyncsSent, dSyncRecordsSent, dSyncFailures, dSyncsReceived                          *prometheus.Desc
	dRecordsReceived, dRecordsApplied, dRecordsRefused, dMessagesRefused                 *prometheus.Desc
	dVerifyRounds, dVerifyFailures, dDivergent, dVerifyAnswered                          *prometheus.Desc
	dRepairRecords, dRepairDrops, dRepairsReceived, dOrphans, dAdoptions, dSnapshotPages *prometheus.Desc
	dVersionConflicts                                                                    *prometheus.Desc

	hTargets, hProbed, hRunning, hChecks, hFlips, hDampings, hDamped *prometheus.Desc

	rProposals, rEntries, rEntriesFailed, rBatchWaits, rCommitDeferred, rProposeLatency, rLeaderChanges *prometheus.Desc
	rLogWrites, rEntryRetries                                                                           *prometheus.Desc
	rForwarded, rForwardedIn, rMerged                                                                   *prometheus.Desc
	rHasLeader, rIsLeader, rTerm, rApplied, rLastIndex, rApplyLag, rLazyCommit                          *prometheus.Desc
	rSnapshots, rInBatches, rInChunks, rInDropped                                                       *prometheus.Desc
}

func newDescs(constLabels prometheus.Labels) *descs {
	d := &descs{}
	var group *[]*prometheus.Desc
	mk := func(name, help string, labels ...string) *prometheus.Desc {
		desc := prometheus.NewDesc(name, help, labels, constLabels)
		*group = append(*group, desc)
		return desc
	}

	group = &d.registry
	d.regServices = mk("muster_registry_services", "Services in the registry's index (defined or implicit), by namespace.", "namespace")
	d.regInstances = mk("muster_registry_instances", "Instances in the registry's index: ephemeral ones of every node (replicated here) and persistent ones.")
	d.regSessions = mk("muster_registry_sessions", "Sessions open on this node.")
	d.regWatchers = mk("muster_registry_watchers", "Open watchers on this node (Watch and WatchServices).")
	d.regNsInstances = mk("muster_registry_namespace_instances", "Instances in the index, by namespace and kind (ephemeral, persistent).", "namespace", "kind")
	d.regNsHealth = mk("muster_registry_namespace_instances_by_health", "Instances in the index, by namespace and served health (healthy, unhealthy; before protection).", "namespace", "health")
	d.regNsSessions = mk("muster_registry_namespace_sessions", "Sessions of this node with an instance in the namespace.", "namespace")
	d.regNsWatchers = mk("muster_registry_namespace_watchers", "Service watchers of this node, by the watched service's namespace.", "namespace")
	d.regWrites = mk("muster_registry_writes_total", "Writes by this node's callers, by operation (register, deregister, heartbeat, session_open, session_register, session_deregister); heartbeats count where they are served, as the owner.", "op")
	d.regWriteErrors = mk("muster_registry_write_errors_total", "Writes by this node's callers that failed, by operation and reason (invalid, not_found, kind_mismatch, limit, not_ready, unavailable, closed, canceled, other).", "op", "reason")
	d.regForwarded = mk("muster_registry_forwards_total", "Beat writes this node sent to their owner node (each attempt).")
	d.regForwardFailures = mk("muster_registry_forward_failures_total", "Attempts to forward a beat write that failed (unreachable owner, ownership moving, not a member yet).")
	d.regServed = mk("muster_registry_forwards_served_total", "Beat writes forwarded by other nodes that this node served as the owner.")
	d.regExpired = mk("muster_registry_expirations_total", "Leases this node ended: beat instances with no beat within their delete timeout (kind=lease) and sessions whose keep-alive lapsed (kind=session).", "kind")
	d.regWatchDelivery = mk("muster_registry_watch_delivery_duration_seconds", "Time from a change of a watched service to each of its watchers being handed the new view, on the registry's clock.")

	group = &d.transport
	d.trConns = mk("muster_transport_connections", "Node-to-node connections open now, including ones draining after a tie-break or a TLS reload.")
	d.trDials = mk("muster_transport_dials_total", "Outbound connection attempts.")
	d.trDialFailures = mk("muster_transport_dial_failures_total", "Outbound connection attempts that failed (connect, TLS or handshake).")
	d.trAccepted = mk("muster_transport_handshakes_accepted_total", "Inbound handshakes that passed authentication.")
	d.trRefused = mk("muster_transport_handshakes_refused_total", "Inbound handshakes refused, by reason: tls, secret, identity, protocol, timeout, io.", "reason")
	d.trLimited = mk("muster_transport_connections_limited_total", "Inbound connections closed unread because the handshake limits (MaxHandshakes, MaxHandshakesPerIP) were reached.")
	d.trKept = mk("muster_transport_duplicates_refused_total", "Inbound connections refused because a live connection to the node they claim was held.")
	d.trShed = mk("muster_transport_messages_shed_total", "Inbound messages refused (ErrBusy) or dropped (one-way) because the handler queue was full, by the limit reached: count (MaxInflight and MaxQueued) or bytes (MaxQueuedBytes).", "limit")
	d.trFramesIn = mk("muster_transport_frames_received_total", "Frames received on authenticated connections.")
	d.trFramesOut = mk("muster_transport_frames_sent_total", "Frames sent on authenticated connections.")
	d.trBytesIn = mk("muster_transport_received_bytes_total", "Bytes received on authenticated connections, framing included.")
	d.trBytesOut = mk("muster_transport_sent_bytes_total", "Bytes sent on authenticated connections, framing included.")

	group = &d.distro
	d.dReady = mk("muster_distro_ready", "1 once the startup load from the peers finished, else 0.")
	d.dLoadDuration = mk("muster_distro_load_duration_seconds", "How long the startup load took (0 before it finished).")
	d.dLoadPeers = mk("muster_distro_load_peers", "Peers whose snapshots the startup load merged.")
	d.dMembers = mk("muster_distro_members", "Live members this node sees, itself included.")
	d.dRecords = mk("muster_distro_records", "Publisher records held, of every owner, by state: live or tombstone.", "state")
	d.dOwned = mk("muster_distro_owned_records", "Records held that this node owns (it syncs and verifies them), tombstones included.")
	d.dPending = mk("muster_distro_pending_syncs", "Record-to-peer sync tasks waiting for their merge window, a retry or a send.")
	d.dSyncsSent = mk("muster_distro_syncs_sent_total", "Sync messages a peer acknowledged.")
	d.dSyncRecordsSent = mk("muster_distro_sync_records_sent_total", "Records in the acknowledged sync messages.")
	d.dSyncFailures = mk("muster_distro_sync_failures_total", "Sync messages that failed; they are retried with backoff unless the peer left.")
	d.dSyncsReceived = mk("muster_distro_syncs_received_total", "Sync messages received from members.")
	d.dRecordsReceived = mk("muster_distro_records_received_total", "Records received in syncs and verify repairs from members.")
	d.dRecordsApplied = mk("muster_distro_records_applied_total", "Received records installed because they were newer than the version held.")
	d.dRecordsRefused = mk("muster_distro_records_refused_total", "Received records not installed, by reason: stale (not newer than the version held: duplicates, reordering, late retries) or not_owner (the sender is not the record's owner).", "reason")
	d.dMessagesRefused = mk("muster_distro_messages_refused_total", "Distro messages refused, by reason: not_member (the sender is not a current member) or malformed (it did not decode).", "reason")
	d.dVerifyRounds = mk("muster_distro_verify_rounds_total", "Anti-entropy rounds this node ran as owner that a peer answered.")
	d.dVerifyFailures = mk("muster_distro_verify_failures_total", "Anti-entropy rounds that failed (peer unreachable or not ready, bad answer).")
	d.dDivergent = mk("muster_distro_divergent_buckets_total", "Digest buckets peers reported as differing, summed over verify rounds.")
	d.dVerifyAnswered = mk("muster_distro_verify_answered_total", "Digests of other owners this node answered.")
	d.dRepairRecords = mk("muster_distro_repair_records_sent_total", "Records sent in verify repairs: missing or older on the peer, or moved past the peer's version.")
	d.dRepairDrops = mk("muster_distro_repair_drops_sent_total", "Records peers were told to drop in verify repairs (this node no longer holds them).")
	d.dRepairsReceived = mk("muster_distro_repairs_received_total", "Verify repair messages received from owners.")
	d.dOrphans = mk("muster_distro_orphans_removed_total", "Records removed because their owner left and OrphanTimeout passed.")
	d.dAdoptions = mk("muster_distro_adoptions_total", "Beat records this node adopted because it became their rendezvous-hash owner.")
	d.dSnapshotPages = mk("muster_distro_snapshot_pages_served_total", "Snapshot pages served to loading peers.")
	d.dVersionConflicts = mk("muster_distro_version_conflicts_total", "Versions of this node's records a peer held with another payload (one version, two states: a restart with the clock set back); each was moved past. Should stay 0.")

	group = &d.health
	d.hTargets = mk("muster_health_targets", "Instances whose health this node's scheduler tracks (probed or not).")
	d.hProbed = mk("muster_health_probed_targets", "Tracked instances checked actively (TCP, HTTP, MySQL).")
	d.hRunning = mk("muster_health_checks_running", "Health checks in flight.")
	d.hChecks = mk("muster_health_checks_total", "Completed health checks by type (tcp, http, mysql) and result (healthy, failed, definite_failure).", "type", "result")
	d.hFlips = mk("muster_health_flips_total", "Health state flips, by the state flipped to: healthy or unhealthy.", "to")
	d.hDampings = mk("muster_health_dampings_total", "Holds started by flap damping (an instance flipping too often is held unhealthy).")
	d.hDamped = mk("muster_health_damped_targets", "Instances held unhealthy by flap damping now.")

	group = &d.raft
	d.rProposals = mk("muster_raft_proposals_total", "Commands proposed through this replica that reached an outcome: applied, rejected (refused by the state rules) or failed (no leader, closed, error).", "outcome")
	d.rEntries = mk("muster_raft_entries_total", "Raft entries proposed (commands are packed into entries: group commit).")
	d.rEntriesFailed = mk("muster_raft_entries_failed_total", "Raft entries whose proposal failed.")
	d.rCommitDeferred = mk("muster_raft_commit_writes_deferred_total", "Raft-log writes of a change of the commit index alone held back for the replica's next write (raftstore.Config.SyncCommitIndex off): synchronous writes saved.")
	d.rLogWrites = mk("muster_raft_log_writes_total", "Synchronous writes of the Raft log (one fsync of its WAL each): entries, hard states, snapshot records. Commands made durable per fsync = proposals over log writes summed over the replicas. 0 while muster_raft_lazy_commit is 0 (they are counted by its wrapper).")
	d.rEntryRetries = mk("muster_raft_entry_retries_total", "Attempts to commit an entry that failed with a temporary error (no leader yet, busy, dropped, timed out) and were tried again; timed_out: those that waited out the whole attempt (two election timeouts) with no answer, a stall of the entry's callers.", "outcome")
	d.rForwarded = mk("muster_raft_entries_forwarded_total", "Entries of this replica, a follower, sent to the leader to go in its rounds; fell_back: those the leader could not take in time (unreachable, no longer the leader), proposed here after all.", "outcome")
	d.rForwardedIn = mk("muster_raft_entries_forwarded_in_total", "Followers' entries this replica, the leader, proposed.")
	d.rMerged = mk("muster_raft_merged_entries_total", "Raft entries this replica, the leader, proposed that carried followers' entries with its own or each other's (one log write and one apply for all).")
	d.rBatchWaits = mk("muster_raft_batch_waits_total", "Raft entries whose batcher waited for the callers it had just answered (BatchWait): filled when the wait ended in time (they came, the entry filled up), expired when the window closed first.", "outcome")
	d.rProposeLatency = mk("muster_raft_proposal_duration_seconds", "Time from a proposal to its outcome (commit and local apply, or failure).")
	d.rLeaderChanges = mk("muster_raft_leader_changes_total", "Leader changes this replica observed (to another replica, or to none).")
	d.rHasLeader = mk("muster_raft_has_leader", "1 if this replica knows a leader, else 0.")
	d.rLazyCommit = mk("muster_raft_lazy_commit", "1 if the Raft log holds back writes of the commit index alone (raftstore Stats.LazyCommit: off with SyncCommitIndex or an unvetted Dragonboat version), else 0.")
	d.rIsLeader = mk("muster_raft_is_leader", "1 if this replica is the leader, else 0.")
	d.rTerm = mk("muster_raft_term", "The Raft term of this replica's leader knowledge.")
	d.rApplied = mk("muster_raft_applied_index", "Last log index applied to the local state machine.")
	d.rLastIndex = mk("muster_raft_last_index", "Last index of the local log (appended, committed or not).")
	d.rApplyLag = mk("muster_raft_apply_lag_entries", "Entries in the local log not yet applied (last index minus applied index).")
	d.rSnapshots = mk("muster_raft_snapshots_total", "Snapshot events by kind: created (taken here), sent (streamed to a lagging replica), aborted (a stream sent that failed), received (streamed from the leader), recovered (state restored from one).", "event")
	d.rInBatches = mk("muster_raft_inbound_batches_total", "Raft message batches received over the Muster transport and handed to Dragonboat.")
	d.rInChunks = mk("muster_raft_inbound_snapshot_chunks_total", "Raft snapshot chunks received over the Muster transport and handed to Dragonboat.")
	d.rInDropped = mk("muster_raft_inbound_dropped_total", "Inbound Raft batches or snapshot chunks dropped by the checks before Dragonboat, by the first rule broken.", "reason")
	return d
}
