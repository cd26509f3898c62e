//! Where a NIC's receive and transmit work is steered, as configured: the CPUs each of
//! its interrupts may land on (`smp_affinity_list`; the effective CPU the kernel picks
//! within it may move by itself) and each queue's RPS and XPS masks. Read around each
//! setup's trials: trials during which any of it changed (irqbalance moving an
//! interrupt, an operator's `echo`) ran on a machine that changed under them and are
//! left out.

use std::collections::BTreeMap;

/// Every steering setting of one interface, by a name that says where it is read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Steering(BTreeMap<String, String>);

impl Steering {
    /// Interface `name`'s steering now, in this process's namespace (a lab's relay host).
    pub fn read(name: &str) -> Steering {
        let interrupts = std::fs::read_to_string("/proc/interrupts").unwrap_or_default();
        let mut settings: BTreeMap<String, String> =
            crate::bench::settings::interface_irqs(name, &interrupts)
                .into_iter()
                .map(|irq| {
                    let cpus = crate::bench::settings::irq_setting(irq, "smp_affinity_list")
                        .unwrap_or_else(|| "not read".into());
                    (format!("irq {irq} smp_affinity_list"), cpus)
                })
                .collect();
        settings.extend(crate::bench::settings::queue_masks(name));
        Steering(settings)
    }

    /// What differs in `later`, one phrase a setting ("rx-0 rps_cpus 1 → 3"), in
    /// name order.
    pub fn changes(&self, later: &Steering) -> Vec<String> {
        let missing = "absent".to_string();
        let names: std::collections::BTreeSet<&String> =
            self.0.keys().chain(later.0.keys()).collect();
        names
            .into_iter()
            .filter_map(|name| {
                let (was, now) = (
                    self.0.get(name).unwrap_or(&missing),
                    later.0.get(name).unwrap_or(&missing),
                );
                (was != now).then(|| format!("{name} {was} → {now}"))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(pairs: &[(&str, &str)]) -> Steering {
        Steering(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    #[test]
    fn a_change_names_the_setting_and_both_values() {
        let start = of(&[("rx-0 rps_cpus", "0"), ("irq 44 smp_affinity_list", "1")]);
        assert!(start.changes(&start.clone()).is_empty());
        let moved = of(&[("rx-0 rps_cpus", "2"), ("irq 44 smp_affinity_list", "1")]);
        assert_eq!(start.changes(&moved), vec!["rx-0 rps_cpus 0 → 2"]);
        let gone = of(&[("rx-0 rps_cpus", "0")]);
        assert_eq!(
            start.changes(&gone),
            vec!["irq 44 smp_affinity_list 1 → absent"]
        );
    }

    #[test]
    fn loopbacks_receive_queue_mask_is_read() {
        // Loopback is in every namespace, with one RX queue.
        let lo = Steering::read("lo");
        assert!(lo.0.contains_key("rx-0 rps_cpus"), "{lo:?}");
    }
}
